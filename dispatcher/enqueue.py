"""A dispatcher's handle on one region's GPU queue: admission, record and message at once.

One Lua script per submit (:meth:`animfleet.region.backlog.Backlog.admit`) checks the
region's admission limit, stores the record and the input and pushes the job's Celery message
(:mod:`animfleet.region.messages`), or keeps both in the region's backlog when no GPU can take
the job now, so two dispatchers can never overfill a region between them, and a record never
exists without its message (or the reverse).

With affinity on, the dispatcher first reads which workers hold the job's image template or
add-ons warm (:mod:`animfleet.region.affinity`) and offers them to the script, which pushes the
message onto the direct queue of the first one that is idle; a job with add-ons then asks that
worker (or, on the shared queue, every idle one) to start loading them while the job is queued.
"""

from __future__ import annotations

from collections.abc import Sequence

from animfleet.job_inputs import JobInputs
from animfleet.jobs import JobRecord
from animfleet.region.affinity import DirectQueues, Holdings, announce_prefetch, things_of
from animfleet.region.backlog import Backlog, BacklogAdmission, BacklogCaps
from animfleet.region.jobstore import ADMITTED, JobStore
from animfleet.region.messages import AnimateMessages
from animfleet.topology import Region


class RegionQueue:
    """A dispatcher's handle on one region: admission, record and Celery message, atomically."""

    def __init__(
        self,
        region: Region,
        store: JobStore,
        allowance: float,
        caps: BacklogCaps | None = None,
        affinity: bool = True,
    ) -> None:
        self.region, self.store, self.allowance = region, store, allowance
        self.caps = caps or BacklogCaps()
        self.backlog = Backlog(store.redis, region.name)
        self._script = self.backlog.admit
        self.messages = AnimateMessages(region)
        self.holdings = Holdings(store.redis, region.name) if affinity else None
        self.direct = DirectQueues(store.redis, region)

    def admit(
        self,
        record: JobRecord,
        image: bytes,
        idempotency: Sequence[tuple[str, int]] = (),
        idempotency_entry: str = "",
        backlog: bool = False,
        tenant_cap: int | None = None,
    ) -> BacklogAdmission:
        """Try to take ``record`` onto this region's GPU queue now; with ``backlog``, keep it in
        the region's backlog when no GPU can take it (unless a cap is reached).

        ``idempotency`` lists (Redis key, ttl) pairs to bind to ``idempotency_entry`` on
        admission; if one is bound already nothing is written and the outcome is REPEAT.
        ``tenant_cap``: the job's tenant's own backlog cap, when tighter than the region's.
        """
        preferred: list[tuple[str, str]] = []
        if self.holdings is not None:
            # The stored input packs control images and a mask: the template is the image's.
            things = things_of(JobInputs.unpack(image).image, record.params.addons)
            preferred = [(w, self.direct.queue(w)) for w in self.holdings.candidates(things)]
        answer = self._script(
            record,
            image,
            message=self.messages.for_job(record.id),
            queue=self.region.queue,
            allowance=self.allowance,
            backlog=backlog,
            caps=self._caps(tenant_cap),
            idempotency=idempotency,
            idempotency_entry=idempotency_entry,
            preferred=preferred,
        )
        if answer.outcome == ADMITTED and record.params.addons:
            names = [use.name for use in record.params.addons]
            announce_prefetch(self.store.redis, self.region.name, names, answer.worker)
        return answer

    def _caps(self, tenant_cap: int | None) -> BacklogCaps:
        if tenant_cap is None:
            return self.caps
        tighter = tenant_cap if self.caps.tenant is None else min(self.caps.tenant, tenant_cap)
        return BacklogCaps(tenant=tighter, region=self.caps.region)
