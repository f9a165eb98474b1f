"""Which run of a job is the live one: a lease per run, with a fencing token.

A run starts in one transaction on the record (:meth:`RunLeases.start`): it draws a fresh token,
writes it and its worker slot into the record (``run``, ``worker``, ``attempts + 1``) and sets
the job's lease key to the token with a short TTL. The run keeps the lease alive itself: its
worker's heartbeat renews it every beat (:meth:`RunLeases.renew`), and each of its writes renews
it too. A run that dies (its process killed, its host lost) stops renewing, and its lease
lapses within the TTL, whatever the worker's *name* does afterwards (a new pool child
heartbeats under the same name).

Every later write of the run (progress, output, finish) goes through :meth:`RunLeases.write`,
which refuses it (:class:`RunFenced`) unless the record still names the run's token, in the
same transaction as the write. A delivery of a job whose run holds a live lease is refused
with :class:`LeaseHeld` (the worker defers it); one whose lease lapsed takes the job over at
once with a new token, and the old run's writes are refused from then on.

Both are safe to send twice. A start or a write whose reply was lost after Redis committed it
is run again by the store client's retry (:mod:`.jobstore`); the start finds its own token on
the record and answers that run (no second attempt counted, no deferral behind its own lease),
and a write's ``change`` sees the record as its first try left it (a finish that finds its own
finish committed keeps it: see :meth:`RunLeases.write`).

A running record with no token was started by a worker that predates leases: its run counts as
live while its worker's heartbeat details exist, as before.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import redis

from animfleet.errors import AnimfleetError, TransientError
from animfleet.jobs import IllegalTransition, JobRecord, JobState
from animfleet.region.jobstore import JobStore
from animfleet.region.keys import RUN_LEASE_KEY
from animfleet.region.workers import WorkerRegistry

RUN_LEASE_TTL_S = 5.0  # as the worker's heartbeat TTL: a few missed beats on a loaded host
TOKEN_BYTES = 8

# KEYS: lease. ARGV: token, ttl ms. Renews only the caller's own lease; a lapsed one stays
# lapsed (its job may be taken over already).
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


@dataclass(frozen=True)
class Run:
    """One run of one job: the worker slot that runs it and its fencing token."""

    job_id: str
    worker: str
    token: str


class LeaseHeld(TransientError):
    """The job's live run holds its lease: this delivery must wait, not run it again."""

    def __init__(self, job_id: str, worker: str | None, remaining_s: float) -> None:
        super().__init__(f"job {job_id} is running on {worker} (lease for {remaining_s:.1f}s)")
        self.job_id, self.worker, self.remaining_s = job_id, worker, remaining_s


class RunFenced(AnimfleetError):
    """A write of a run that no longer holds its job (another run took it over, or the sweeper
    requeued or ended it). Not a ``RuntimeError``: the pipeline turns those into model errors,
    and this must stop the run, not fail the job."""

    retryable = False

    def __init__(self, run: Run, holder: str | None) -> None:
        super().__init__(f"job {run.job_id}: run {run.token} was fenced off (now: {holder})")
        self.run, self.holder = run, holder


class RunLeases:
    """The runs of one region's jobs (any region: the keys are per job)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.redis: redis.Redis = store.redis
        self._renew = self.redis.register_script(_RENEW)

    @staticmethod
    def key(job_id: str) -> str:
        return RUN_LEASE_KEY + job_id

    def live(self, record: JobRecord) -> bool:
        """Whether ``record``'s run is alive: its lease holds its token (or, for a record
        without a token, its worker's heartbeat details exist)."""
        if record.status is not JobState.RUNNING:
            return False
        if record.run is None:
            present = WorkerRegistry(self.redis, record.region).present
            return record.worker is not None and present(record.worker)
        return _text(self.redis.get(self.key(record.id))) == record.run

    def held(self, job_id: str) -> bool:
        """Whether some run of ``job_id`` still holds its lease (it may still write)."""
        return bool(self.redis.exists(self.key(job_id)))

    def start(
        self,
        job_id: str,
        worker: str,
        ttl_s: float,
        prepare: Callable[[JobRecord], None] | None = None,
    ) -> tuple[JobRecord, Run | None]:
        """Start a run of ``job_id`` on ``worker`` and take its lease, in one transaction.

        Raises :class:`LeaseHeld` while another run's lease is live, and
        :class:`IllegalTransition` for a terminal job. ``prepare`` may change the record first
        (in the same transaction); if it ends the job (e.g. it died too often), no run starts
        and the returned run is ``None``.
        """
        token, lease = secrets.token_hex(TOKEN_BYTES), self.key(job_id)

        def change(record: JobRecord) -> None:
            if record.run == token and record.status is JobState.RUNNING:
                return  # this very start committed and its reply was lost: it is the run
            if record.status.terminal:
                raise IllegalTransition(f"job {job_id} is {record.status.value}")
            # The lease is WATCHed: a renewal meanwhile runs this again. A tokenless run on
            # this very slot is gone: the slot is free to take a job.
            mine = record.run is None and record.worker == worker
            if self.live(record) and not mine:
                remaining_ms = self.redis.pttl(lease)
                remaining = remaining_ms / 1000 if remaining_ms > 0 else RUN_LEASE_TTL_S
                raise LeaseHeld(job_id, record.worker, remaining)
            if prepare is not None:
                prepare(record)
            if record.status.terminal:
                record.run = None
                return
            record.transition(JobState.RUNNING)  # attempts + 1
            record.worker, record.run, record.progress.step = worker, token, 0

        def take(pipe: redis.client.Pipeline, record: JobRecord) -> None:
            if record.run == token:
                pipe.set(lease, token, px=int(ttl_s * 1000))

        record = self.store.update(job_id, change, also=take, watch=(lease,))
        return record, Run(job_id, worker, token) if record.run == token else None

    def write(
        self,
        run: Run,
        change: Callable[[JobRecord], None],
        ttl_s: float,
        also: Callable[[redis.client.Pipeline, JobRecord], None] | None = None,
    ) -> JobRecord:
        """Apply ``change`` for ``run`` only if the record still names it (else
        :class:`RunFenced`), in one transaction that also renews the run's lease, or drops it
        once the job left ``running``."""
        lease = self.key(run.job_id)

        def fenced(record: JobRecord) -> None:
            if record.run != run.token:
                raise RunFenced(run, record.run)
            change(record)

        def renew(pipe: redis.client.Pipeline, record: JobRecord) -> None:
            if record.status is JobState.RUNNING:
                pipe.set(lease, run.token, px=int(ttl_s * 1000))
            else:
                pipe.delete(lease)
            if also is not None:
                also(pipe, record)

        return self.store.update(run.job_id, fenced, also=renew)

    def renew(self, run: Run, ttl_s: float) -> bool:
        """Extend ``run``'s own lease by ``ttl_s``; False if it lapsed or another run holds it."""
        return bool(self._renew(keys=[self.key(run.job_id)], args=[run.token, int(ttl_s * 1000)]))


def _text(raw: object) -> str | None:
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)
