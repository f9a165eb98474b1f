"""Finds a region's jobs that nothing will finish, and finishes or requeues them.

Runs in its own process (``animfleet sweeper``, :mod:`workers.sweeping`), every ``poll_s``;
several copies are safe: each pass holds the region's short lease (:mod:`.sweep_lease`, renewed
between the parts of a pass; a copy that lost it stops), and every change is a transaction on
the record that re-checks what the pass saw.

- A ``running`` job whose run is gone (its run lease lapsed, :mod:`.runs`: host lost, process
  or pool child killed, even while a new pool child heartbeats under the same worker name)
  goes back on the queue at once, the same job id, with its message pushed in the same
  transaction; past its ``deadline`` it ends ``canceled``/``deadline_exceeded`` instead, and
  after ``max_deliveries`` starts it fails ``worker_lost``. A run whose lease is live but that
  is three heartbeat TTLs past its ``deadline`` or ``hard_time_limit_s`` is hung (a live run
  checks both at every step) and is handled the same way. Recovery takes the heartbeat TTL
  plus one pass, not the broker's visibility timeout. A job placed on a worker's direct queue
  (:mod:`.affinity`) that the worker never took moves to the shared queue once the worker
  stops being live. At most one output holds: the requeue drops the lost run's token, so its
  writes are refused from then on, and a late duplicate delivery finds the record running
  under a live lease (and waits) or terminal (and does nothing).
- A ``queued`` job waits at most ``max_queued_s`` (the default start deadline), and at most
  ``orphan_after_s`` in a region that has had no live worker that long: then it ends ``expired``
  with ``no_capacity``, on the GPU queue and in the backlog alike (the scheduler sends a
  workerless region's backlog to the regions its ring allows first, when any has a worker).
- Lapses seen just after the region's Redis (re)started are not trusted: workers need one TTL to
  beat again, so the pass waits until the server has been up that long.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis
import structlog
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from animfleet.jobs import IllegalTransition, JobRecord, JobState
from animfleet.region.affinity import DirectQueues
from animfleet.region.archive import Objects, RecordArchive
from animfleet.region.backlog import Backlog
from animfleet.region.broker import BrokerUnavailable
from animfleet.region.broker_outbox import BrokerOutbox
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.keys import (
    NO_WORKERS_KEY,
    QUEUED_SET,
    WORKER_SET,
)
from animfleet.region.messages import AnimateMessages
from animfleet.region.orphan_outputs import OrphanOutputs
from animfleet.region.retention import Retention
from animfleet.region.runs import RunLeases
from animfleet.region.store_client import server_info
from animfleet.region.sweep_lease import SweepLease, SweepLost
from animfleet.region.usage import UsageBook
from animfleet.region.workers import WorkerRegistry
from animfleet.settings import EnvSettings, load
from animfleet.topology import Region

log = structlog.stdlib.get_logger("animfleet.sweeper")


class SweepSettings(EnvSettings):
    """``ANIMFLEET_SWEEPER_*``: read by the sweeper process (``animfleet sweeper``)."""

    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_SWEEPER_")

    heartbeat_ttl_s: float = Field(default=5.0, gt=0)  # what workers publish
    max_deliveries: int = Field(default=3, ge=1, le=20)  # as the workers' own setting
    # As the workers' own: a run still live this long (plus three heartbeat TTLs) after it
    # started is hung, whatever pool it runs in, and is ended or requeued like a lost one.
    hard_time_limit_s: float = Field(default=600.0, gt=0)
    max_queued_s: float = Field(default=3600.0, gt=0)  # the default start deadline
    orphan_after_s: float = Field(default=900.0, gt=0)  # queued with no live worker this long
    lease_s: float = Field(default=5.0, gt=0)
    # Finished records move to the region's bucket after this long (reads fall back to it).
    archive_after_s: float = Field(default=86400.0, ge=0)
    # How often outputs that no record points to are looked for and deleted.
    reconcile_every_s: float = Field(default=300.0, gt=0)
    # An output no record points to is deleted once seen so this long (two looks apart).
    orphan_output_age_s: float = Field(default=600.0, ge=0)
    retention_every_s: float = Field(default=60.0, ge=0)  # tenants' retention applied
    poll_s: float = Field(default=1.0, gt=0)  # between passes

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SweepSettings:
        return load(cls, env)


@dataclass
class SweepResult:
    requeued: list[str] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)  # job id -> the state it ended in
    archived: list[str] = field(default_factory=list)
    retention_deleted: list[str] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)  # object keys
    orphans_unreadable: list[str] = field(default_factory=list)  # their record read failed
    rescued: int = 0  # messages moved from a gone worker's direct queue to the shared one


class Sweeper:
    """One region's sweeps (see the module docstring)."""

    def __init__(
        self,
        region: Region,
        store: JobStore,
        settings: SweepSettings,
        objects: Objects | None = None,
    ) -> None:
        self.region, self.store, self.settings = region, store, settings
        self.objects = objects
        prefix = region.storage.prefix
        self.archive = RecordArchive(objects, prefix) if objects is not None else None
        self.orphans = None
        if objects is not None and self.archive is not None:
            self.orphans = OrphanOutputs(store, objects, self.archive, prefix)
        self.usage = self.retention = None
        if objects is not None:
            self.usage = UsageBook(store, region.name, objects, prefix)
            self.retention = Retention(store, region.name, objects, prefix, self.usage)
        self._retained_at = 0.0
        self._reconciled_at = 0.0
        self.redis: redis.Redis = store.redis
        self.messages = AnimateMessages(region)
        self.workers = WorkerRegistry(store.redis, region.name)
        self.runs = RunLeases(store)
        self.direct = DirectQueues(store.redis, region)
        # A broker apart from the store: requeues go through the outbox (:mod:`.broker_outbox`).
        self.outbox = None if region.store_is_broker else BrokerOutbox(store, region)
        self.backlog = Backlog(store.redis, region.name)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{id(self)}"  # names the process
        self.lease = SweepLease(store.redis, region.name, self.holder, settings.lease_s)

    def sweep(self, now: float | None = None) -> SweepResult:
        """One pass; does nothing while another copy holds the region's lease."""
        now = time.time() if now is None else now
        result = SweepResult()
        if not self.lease.hold():
            return result
        try:
            self._pass(now, result)
        except SweepLost as lost:  # the other copy sweeps from here
            log.warning("sweeper.lease_lost", region=self.region.name, error=str(lost))
        return result

    def _pass(self, now: float, result: SweepResult) -> None:
        if self._redis_up_s() >= self.settings.heartbeat_ttl_s + 1.0:
            self._sweep_running(now, result)
        self.lease.keep()
        # Jobs placed on a worker that then left wait on the shared queue instead.
        result.rescued = self._rescue()
        if result.rescued:
            log.info("sweeper.direct_rescued", region=self.region.name, messages=result.rescued)
        self._sweep_queued(now, result)
        self.lease.keep()
        if self.usage is not None and self.retention is not None:
            # Before archiving: the roll-up reads the records still in Redis.
            self.retention.index(self.usage.roll_up(now))
            if now - self._retained_at >= self.settings.retention_every_s:
                self._retained_at = now
                result.retention_deleted = self.retention.apply(now)
        if self.archive is not None:
            self.lease.keep()
            self._archive_finished(now, result)
            if now - self._reconciled_at >= self.settings.reconcile_every_s:
                self.lease.keep()
                self._reconciled_at = now
                self.reconcile_outputs(result)

    def _rescue(self) -> int:
        if self.outbox is None:
            return len(self.direct.rescue(consuming=self.workers.is_live))
        try:
            return self.direct.rescue_on(self.outbox.link, consuming=self.workers.is_live)
        except BrokerUnavailable as error:  # the next pass tries again
            log.warning("sweeper.rescue_failed", region=self.region.name, error=str(error))
            return 0

    def _redis_up_s(self) -> float:
        info = server_info(self.redis, "server")
        return float(info.get("uptime_in_seconds", 0))

    # -- running jobs whose run is gone ------------------------------------------------------
    def _sweep_running(self, now: float, result: SweepResult) -> None:
        for record in self.store.running(self.region.name):
            # The job's own run lease, not its worker's name; a live run past its deadline
            # or hard limit is hung (it checks both at every step it takes).
            if self.runs.live(record) and not self._overdue(record, now):
                continue
            self.lease.keep()  # each recovery is a change only the lease's holder makes
            ended = self._recover(record, now)
            if ended is None:
                result.requeued.append(record.id)
                log.warning("job.requeued", job_id=record.id, lost_worker=record.worker)
            elif ended:
                result.ended[record.id] = ended
                log.warning("job.ended_by_sweeper", job_id=record.id, status=ended)

    def _recover(self, seen: JobRecord, now: float) -> str | None:
        """Requeue ``seen`` (None) or end it; '' if the record moved on meanwhile."""
        outcome: list[str] = []

        def change(record: JobRecord) -> None:
            if record.status is not JobState.RUNNING or record.worker != seen.worker:
                raise IllegalTransition(f"job {record.id} moved on")
            alive = self.runs.live(record) and not self._overdue(record, now)
            if record.run != seen.run or alive:  # the lease is WATCHed
                raise IllegalTransition(f"job {record.id}: its run is alive")
            record.run = None  # the lost run's writes are refused from now on
            if record.deadline is not None and now >= record.deadline:
                record.end(JobState.CANCELED, "deadline_exceeded", "its worker was lost")
            elif record.attempts >= self.settings.max_deliveries:
                message = f"its worker was lost {record.attempts} times running it; giving up"
                record.end(JobState.FAILED, "worker_lost", message)
            else:
                record.transition(JobState.QUEUED)
                record.worker, record.progress.step = None, 0
            outcome.append(record.status.value)

        sent: list[str] = []

        def push(pipe: redis.client.Pipeline, record: JobRecord) -> None:
            sent.clear()  # a retried transaction adds its entry anew
            if record.status is not JobState.QUEUED:
                return
            message = self.messages.for_job(record.id)
            if self.outbox is None:
                pipe.lpush(self.region.queue, message)
            else:
                sent.append(self.outbox.add(pipe, self.region.queue, message))

        try:
            self.store.update(seen.id, change, also=push, watch=(RunLeases.key(seen.id),))
        except (IllegalTransition, JobNotFound):
            return ""
        if self.outbox is not None:
            self.outbox.deliver(sent)
        return None if outcome[-1] == JobState.QUEUED.value else outcome[-1]

    def _overdue(self, record: JobRecord, now: float) -> bool:
        """Whether ``record``'s run is past its deadline or the hard time limit, with three
        heartbeat TTLs of grace: its worker ends such a run itself, or stops renewing it."""
        grace = 3 * self.settings.heartbeat_ttl_s
        if record.deadline is not None and now >= record.deadline + grace:
            return True
        started = record.started_at
        return started is not None and now - started >= self.settings.hard_time_limit_s + grace

    # -- queued jobs that would wait forever -------------------------------------------------
    def _sweep_queued(self, now: float, result: SweepResult) -> None:
        queued = QUEUED_SET + self.region.name
        oldest = now - self.settings.max_queued_s
        overdue = [_text(raw) for raw in self.redis.zrangebyscore(queued, "-inf", oldest)]
        for job_id in overdue:
            self._expire(job_id, "start_deadline_exceeded", "waited longer than the region allows")
            result.ended[job_id] = JobState.EXPIRED.value
        since = self._no_workers_since(now)
        if since is not None and now - since >= self.settings.orphan_after_s:
            waiting = [_text(raw) for raw in self.redis.zrange(queued, 0, -1)]
            waiting += self.backlog.waiting()
            for job_id in waiting:
                message = f"no GPU worker in region {self.region.name} for {now - since:.0f}s"
                if self._expire(job_id, "no_capacity", message):
                    result.ended[job_id] = JobState.EXPIRED.value

    def _no_workers_since(self, now: float) -> float | None:
        key = NO_WORKERS_KEY + self.region.name
        live = self.redis.zcount(WORKER_SET + self.region.name, now, "+inf")
        if live:
            self.redis.delete(key)
            return None
        self.redis.set(key, now, nx=True)
        raw = self.redis.get(key)
        return float(raw) if raw is not None else now

    def _expire(self, job_id: str, code: str, message: str) -> bool:
        def change(record: JobRecord) -> None:
            if record.status is not JobState.QUEUED or record.region != self.region.name:
                raise IllegalTransition(f"job {record.id} is {record.status.value} here")
            record.end(JobState.EXPIRED, code, message)

        def leave_backlog(pipe: redis.client.Pipeline, record: JobRecord) -> None:
            self.backlog.remove(record.id, record.tenant, pipe)

        try:
            self.store.update(job_id, change, also=leave_backlog)
        except (IllegalTransition, JobNotFound):
            self.redis.zrem(QUEUED_SET + self.region.name, job_id)
            return False
        return True

    # -- finished records and outputs ---------------------------------------------------------
    def _archive_finished(self, now: float, result: SweepResult) -> None:
        assert self.archive is not None
        before = now - self.settings.archive_after_s
        for job_id in self.store.finished_before(self.region.name, before):
            if self.store.archive(job_id, self.region.name, self.archive):
                result.archived.append(job_id)

    def reconcile_outputs(
        self, result: SweepResult | None = None, now: float | None = None
    ) -> list[str]:
        """Delete outputs no record points to (see :mod:`.orphan_outputs`); the keys deleted."""
        assert self.orphans is not None
        now = time.time() if now is None else now
        done = self.orphans.look(now, self.settings.orphan_output_age_s)
        if result is not None:
            result.orphans_deleted.extend(done.deleted)
            result.orphans_unreadable.extend(done.unreadable)
        return done.deleted


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
