"""Finished job records moved out of Redis into the region's object store, still readable.

A finished record is only read, rarely, and Redis (``noeviction``) holds every byte in memory:
after ``archive_after_s`` the sweeper writes it to ``<prefix>records/<job id>.json`` in the
region's bucket and deletes it from Redis; ``GET`` falls back to the archive when Redis has no
record. Outputs and archived records share the bucket and its retention.

Reading one tells "there is none" (the store's definite not-found) from "it cannot be read now"
(a throttle, a timeout): the second raises, because callers delete things when there is none.
"""

from __future__ import annotations

from typing import Protocol

from animfleet.errors import NotFound
from animfleet.jobs import JobRecord

CONTENT_TYPE = "application/json"


class Objects(Protocol):
    """The part of an object store (:mod:`storage`) the archive and the sweeper use."""

    def put(self, key: str, data: bytes, content_type: str) -> object: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, key: str) -> None: ...

    def list_keys(self, prefix: str) -> list[str]: ...


class RecordArchive:
    """One region's archived records, under ``prefix`` in its object store."""

    def __init__(self, objects: Objects, prefix: str = "") -> None:
        self.objects, self.prefix = objects, prefix

    def key(self, job_id: str) -> str:
        return f"{self.prefix}records/{job_id}.json"

    def put(self, record: JobRecord) -> None:
        self.objects.put(self.key(record.id), record.model_dump_json().encode(), CONTENT_TYPE)

    def get(self, job_id: str) -> JobRecord | None:
        """The archived record, or ``None`` on the store's definite answer that there is none.

        Any other failure to read it (a throttle, a timeout, storage away) propagates as the
        store raised it (``storage.StorageUnavailable``): it says nothing about the record.
        """
        try:
            raw = self.objects.get(self.key(job_id))
        except NotFound:
            return None
        return JobRecord.model_validate_json(raw)
