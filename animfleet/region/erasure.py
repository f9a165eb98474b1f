"""Erasing a job (by request or by its tenant's retention), what it leaves behind, and what
its deletion must find.

A deleted job keeps a tombstone (when it was deleted) as long as an idempotency key may still
name it, so a retried submit answers "deleted" instead of silently creating the job again; and
the uploads a job's request named are remembered with it, so deleting the job deletes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import redis

from animfleet.jobs import JobRecord
from animfleet.region import outbox
from animfleet.region.archive import Objects, RecordArchive
from animfleet.region.joblogs import JobLogs
from animfleet.region.jobstore import IDEMPOTENCY_TTL_S, JobStore
from animfleet.region.keys import DELETED_KEY, JOB_UPLOADS, RECORD_TTL_S
from animfleet.region.listing import Listing

# As long as a record lives: an idempotency entry (a day) or a job id (a record's life).
TOMBSTONE_TTL_S = max(IDEMPOTENCY_TTL_S, RECORD_TTL_S)


class Erasure:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def note_uploads(self, job_id: str, keys: Iterable[str]) -> None:
        keys = sorted(keys)
        if keys:
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.sadd(JOB_UPLOADS + job_id, *keys)
                pipe.expire(JOB_UPLOADS + job_id, RECORD_TTL_S)
                pipe.execute()

    def uploads(self, job_id: str) -> list[str]:
        return sorted(
            raw.decode() if isinstance(raw, bytes) else str(raw)
            for raw in self.redis.smembers(JOB_UPLOADS + job_id)
        )

    def mark_deleted(self, job_id: str, tenant: str, at: float) -> None:
        tombstone = json.dumps({"tenant": tenant, "at": at})
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(DELETED_KEY + job_id, tombstone, ex=TOMBSTONE_TTL_S)
            pipe.delete(JOB_UPLOADS + job_id)
            pipe.execute()

    def deleted_at(self, job_id: str, tenant: str | None) -> float | None:
        """When ``tenant``'s job ``job_id`` was deleted (any tenant's when None); None if not."""
        raw = self.redis.get(DELETED_KEY + job_id)
        if raw is None:
            return None
        tombstone = json.loads(raw)
        if tenant is not None and tombstone["tenant"] != tenant:
            return None
        return float(tombstone["at"])


def erase_here(
    store: JobStore, region: str, objects: Objects, prefix: str, record: JobRecord, at: float
) -> int:
    """Erase what ``region`` (its Redis ``store`` and storage ``objects`` under ``prefix``)
    holds of ``record``'s ended job: every run's output, its archived record, its record,
    input, webhook events and log lines; in its home region also its uploads and listing
    entry, leaving a tombstone, and its webhook is told (``job.deleted``). How many objects
    were deleted."""
    outputs = f"{prefix}outputs/"
    keys = [
        key
        for key in objects.list_keys(f"{outputs}{record.id}")
        if key == f"{outputs}{record.id}.mp4" or key.startswith(f"{outputs}{record.id}/")
    ]
    archived = RecordArchive(objects, prefix).key(record.id)
    keys += [key for key in objects.list_keys(archived) if key == archived]
    erasure = Erasure(store.redis)
    if region == record.home_region:
        keys += erasure.uploads(record.id)
    for key in keys:
        objects.delete(key)
    store.erase(record.id, region)
    JobLogs(store.redis).delete(record.id)
    if region == record.home_region:
        Listing(store.redis).remove(record.tenant, record.id)
        erasure.mark_deleted(record.id, record.tenant, at)
        outbox.emit_deleted(store.redis, record, region, at)
    return len(keys)
