"""Per-tenant retention: a tenant's jobs are erased this long after they ended.

The setting is the tenant's ``retention_s`` limit (``animfleet keys limits``, in the key
store). Each region's sweeper indexes the jobs it rolls up for usage (every finished job of
the region, once: :data:`RETAINED` per tenant, by end time) and, every
``retention_every_s``, erases the jobs of tenants with a retention whose time is up, wherever
the record is (Redis or the archive), as a deletion by request would in this region. Each
erasure counts in the tenant's usage as ``retention_deleted``.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from animfleet.errors import AnimfleetError
from animfleet.jobs import JobRecord
from animfleet.region.archive import Objects, RecordArchive
from animfleet.region.erasure import erase_here
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.keys import RETAINED
from animfleet.region.tenants import Tenants
from animfleet.region.usage import UsageBook

log = structlog.stdlib.get_logger("animfleet.retention")

INDEX_KEPT_S = 400 * 24 * 3600  # longer than any retention a tenant may set
BATCH = 100  # jobs erased per tenant per pass


class Retention:
    def __init__(
        self, store: JobStore, region: str, objects: Objects, prefix: str, usage: UsageBook
    ) -> None:
        self.store, self.region, self.objects, self.prefix = store, region, objects, prefix
        self.usage = usage
        self.tenants = Tenants(store.redis)
        self.archive = RecordArchive(objects, prefix)

    def _key(self, tenant: str) -> str:
        return f"{RETAINED}{self.region}:{tenant}"

    def index(self, records: Iterable[JobRecord]) -> None:
        """Remember finished jobs by tenant and end time (those the usage roll-up counted)."""
        with self.store.redis.pipeline(transaction=False) as pipe:
            for record in records:
                ended = record.completed_at or record.created_at
                pipe.zadd(self._key(record.tenant), {record.id: ended})
                pipe.zremrangebyscore(self._key(record.tenant), "-inf", ended - INDEX_KEPT_S)
            pipe.execute()

    def apply(self, now: float) -> list[str]:
        """Erase the jobs whose tenant's retention has run out; their ids."""
        erased = []
        for tenant in self.tenants.tenants():
            retention = self.tenants.limits(tenant).retention_s
            if retention is None:
                continue
            key = self._key(tenant)
            for raw in self.store.redis.zrangebyscore(key, "-inf", now - retention, 0, BATCH):
                job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
                try:
                    record = self._record(job_id)
                except AnimfleetError as error:  # its archive unreadable now: a later pass
                    log.warning("job.retention_unreadable", erased_job=job_id, error=str(error))
                    continue
                if record is not None and record.tenant == tenant:
                    self.usage.note_deleted(record, by_retention=True)
                    erase_here(self.store, self.region, self.objects, self.prefix, record, now)
                    erased.append(job_id)
                    # No job_id field: the line would start the erased job's log again.
                    log.info("job.retention_deleted", erased_job=job_id, tenant=tenant)
                self.store.redis.zrem(key, job_id)
        return erased

    def _record(self, job_id: str) -> JobRecord | None:
        try:
            return self.store.get(job_id)
        except JobNotFound:
            return self.archive.get(job_id)
