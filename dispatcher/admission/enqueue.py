"""A dispatcher's handle on one region's GPU queue: admission, record and message at once.

One Lua script per submit (:class:`animfleet.region.admission.AdmissionScript`) checks the
region's admission limit, stores the record and the input and pushes the job's Celery message
(:mod:`animfleet.region.messages`), or keeps both in the region's backlog when no GPU can take
the job now, so two dispatchers can never overfill a region between them, and a record never
exists without its message (or the reverse).

With affinity on, the script also looks up which workers hold the job's image template (by the
digest on its record) or add-ons warm (:mod:`animfleet.region.affinity`) and pushes the message
onto the direct queue of the first one that is idle; a job with add-ons then asks that worker
(or, on the shared queue, every idle one) to start loading them while the job is queued.

With the region's broker apart from its store, the script adds the message to the region's
broker outbox instead and this handle publishes it at once (:mod:`animfleet.region.broker_outbox`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import redis
import structlog

from animfleet.errors import TransientError
from animfleet.jobs import JobRecord
from animfleet.region.admission import (
    NONCE_BYTES,
    Admission,
    AdmissionOutcome,
    AdmissionScript,
    BacklogCaps,
)
from animfleet.region.affinity import Holdings, announce_prefetch, direct_queue, things_of
from animfleet.region.broker import has_direct_queues
from animfleet.region.broker_outbox import BrokerOutbox
from animfleet.region.jobstore import JobStore
from animfleet.region.messages import AnimateMessages
from animfleet.topology import Region
from dispatcher.errors import DispatcherError

log = structlog.stdlib.get_logger("animfleet.dispatcher")


class OutcomeUnknown(DispatcherError, TransientError, redis.ConnectionError):
    """An admission whose reply was lost, and whose outcome could not be read either: the job
    may exist. Whoever bound keys for it keeps them bound."""


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
        self.script = AdmissionScript(store.redis, region.name)
        self.messages = AnimateMessages(region)
        # No holder's direct queue on RabbitMQ (has_direct_queues): every job takes the shared one.
        placing = affinity and has_direct_queues(region.broker_url)
        self.holdings = Holdings(store.redis, region.name) if placing else None
        self.direct_prefix = direct_queue(region, "")
        self.outbox = None if region.store_is_broker else BrokerOutbox(store, region)

    def admit(
        self,
        record: JobRecord,
        inputs: bytes,
        idempotency: Sequence[tuple[str, int]] = (),
        idempotency_entry: str = "",
        backlog: bool = False,
        tenant_cap: int | None = None,
        index: bool = False,
        uploads: Sequence[str] = (),
    ) -> Admission:
        """Try to take ``record`` and its stored ``inputs`` onto this region's GPU queue now;
        with ``backlog``, keep it in the region's backlog when no GPU can take it (unless a cap
        is reached).

        ``idempotency`` lists (Redis key, ttl) pairs to bind to ``idempotency_entry`` on
        admission; if one is bound already nothing is written and the outcome is REPEAT.
        ``tenant_cap``: the job's tenant's own backlog cap, when tighter than the region's.
        ``index``: list the job under its tenant here (this region is the job's home), with the
        ``uploads`` its request named.

        The call carries a nonce of its own. When it fails (its reply lost after the store ran
        it, and the store client's retries failed too), the store is asked what this very call
        did: the job it admitted is answered, not a second one, nor an error for a job that
        exists; no second admission is sent. The call's error is raised when it wrote nothing,
        :class:`OutcomeUnknown` when that cannot be learned either.
        """
        nonce = secrets.token_hex(NONCE_BYTES)
        held_by: list[str] = []
        if self.holdings is not None:
            things = things_of(record.params.image_sha256, record.params.addons)
            held_by = [self.holdings.key(thing) for thing in things]
        try:
            answer = self.script.admit(
                record,
                inputs,
                mode="backlog" if backlog else "direct",
                message=self.messages.for_job(record.id),
                queue=self.region.queue,
                allowance=self.allowance,
                caps=self._caps(tenant_cap),
                idempotency=idempotency,
                idempotency_entry=idempotency_entry,
                held_by=held_by,
                direct_prefix=self.direct_prefix,
                index=index,
                outbox=self.outbox is not None,
                uploads=uploads,
                nonce=nonce,
            )
        except redis.RedisError as failed:
            try:
                recalled = self.script.recall(record.id, nonce)
            except redis.RedisError as error:
                raise OutcomeUnknown(f"{failed}; asking what it did: {error}") from failed
            if recalled is None:
                raise
            log.warning("job.admission_reply_lost", job_id=record.id, error=str(failed))
            answer = recalled
        return self._placed(record, answer)

    def _placed(self, record: JobRecord, answer: Admission) -> Admission:
        if self.outbox is not None and answer.outbox_entry:
            self.outbox.deliver([answer.outbox_entry])
        if answer.outcome is AdmissionOutcome.ADMITTED and record.params.addons:
            names = [use.name for use in record.params.addons]
            announce_prefetch(self.store.redis, self.region.name, names, answer.worker)
        return answer

    def close(self) -> None:
        """Close the connection to a broker apart from the store (none otherwise)."""
        if self.outbox is not None:
            self.outbox.link.close()

    def _caps(self, tenant_cap: int | None) -> BacklogCaps:
        if tenant_cap is None:
            return self.caps
        tighter = tenant_cap if self.caps.tenant is None else min(self.caps.tenant, tenant_cap)
        return BacklogCaps(tenant=tighter, region=self.caps.region)
