"""Many submits in one call: per-item results, so one bad item never sinks the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from animfleet.errors import AnimfleetError
from animfleet_api.bounds import MAX_BATCH_JOBS as MAX_BATCH
from dispatcher.inputs import InvalidInput

Handle = TypeVar("Handle", covariant=True)


class Submitter(Protocol[Handle]):
    """What submits one job (:class:`dispatcher.Client`)."""

    def submit(self, image: bytes, prompt: str, **fields: Any) -> Handle: ...


def submit_many(
    client: Submitter[Handle], items: Sequence[Mapping[str, Any]], home_region: str | None = None
) -> list[Handle | AnimfleetError]:
    """Submit each item (the keyword arguments of :meth:`Client.submit`, ``image`` and
    ``prompt`` included) in order; each result is the job's handle or the error that item
    alone met (invalid input, idempotency conflict, backlog full, broker unavailable).

    Items carry their own ``idempotency_key``, so resending a batch after a timeout creates
    nothing twice. Raises :class:`InvalidInput` (field ``jobs``) for more than 500 items.
    """
    if len(items) > MAX_BATCH:
        raise InvalidInput("jobs", f"at most {MAX_BATCH} items per batch, got {len(items)}")
    results: list[Handle | AnimfleetError] = []
    for item in items:
        fields = dict(item)
        fields.setdefault("home_region", home_region)
        try:
            results.append(client.submit(fields.pop("image"), fields.pop("prompt"), **fields))
        except AnimfleetError as error:
            results.append(error)
    return results
