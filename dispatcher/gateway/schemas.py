"""The gateway's answers, and how a request body becomes :meth:`dispatcher.Client.submit`'s
arguments. The request bodies themselves are the wire contract's (:mod:`animfleet_api.request`):
the schema enforces what it publishes (types, ranges, lengths), so a request that breaks it is
refused whole, a batch too; what no schema can say (an image that decodes, a metadata size) is
checked by :mod:`dispatcher.inputs`, per batch item.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from animfleet.jobview import JobView
from animfleet_api.request import JobRequest

__all__ = [
    "BatchResponse",
    "BatchResult",
    "ErrorBody",
    "ErrorResponse",
    "JobView",
    "RegionView",
    "Regions",
    "client_options",
]

# Sent apart from the options: resolved to bytes (image, mask), renamed (webhook), expanded
# (size), or the batch item's own (idempotency_key).
_SENT_APART = {"image", "mask", "prompt", "size", "webhook", "idempotency_key"}


def client_options(body: JobRequest) -> dict[str, Any]:
    """Keyword arguments for :meth:`dispatcher.Client.submit` besides image and prompt."""
    fields = body.model_dump(exclude=_SENT_APART, exclude_none=True)
    if body.size is not None:
        fields.setdefault("width", body.size)
        fields.setdefault("height", body.size)
    fields["webhook_url"] = body.webhook
    return fields


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class BatchResult(BaseModel):
    """Per item, in request order: ``status`` as a single submit would answer (202 created,
    200 an idempotent repeat, or the error's code) and the job or the error."""

    status: int
    job: JobView | None = None
    error: ErrorBody | None = None


class BatchResponse(BaseModel):
    results: list[BatchResult]


class RegionView(BaseModel):
    name: str
    live_workers: int
    busy_workers: int
    queue_depth: int
    backlog: int = Field(description="jobs waiting for a GPU in the region's backlog")
    scaling_signal: float = Field(description="(backlog + in flight) / max(live workers, 1)")


class Regions(BaseModel):
    regions: list[RegionView]


class Replayed(BaseModel):
    webhook_id: str
    type: str
