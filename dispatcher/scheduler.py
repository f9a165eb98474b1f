"""The scheduler process (``animfleet scheduler``): moves backlog jobs onto GPU queues.

Each pass over a region, under that region's lease (so two copies never both move its jobs):
jobs go onto the region's own GPU queue while it has room (one atomic script per batch, fair
share by deficit round robin, :mod:`animfleet.region.handoff`), each idle worker getting a job
whose template or add-ons it holds warm when its tenant's next jobs have one; when it has
none, jobs spill to the regions the routing table sends this region's traffic to, then its
fallback ring, each only while that region has room and no backlog of its own (a cell's
sibling cells come first, before any other region). Passes run
every ``poll_s`` (100 ms), so a freed GPU gets its next job within about that. Everything
lives in Redis: a scheduler that dies loses nothing, and the next lease holder finishes or
returns its half-done spills. With a broker apart from the store (RabbitMQ), the lease holder
is also the relay of the region's broker outbox (:mod:`animfleet.region.broker_outbox`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Mapping

import structlog
from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from animfleet.jobs import IllegalTransition, JobRecord, JobState
from animfleet.metrics import port_from_env, serve
from animfleet.region.admission import AdmissionOutcome, admission_limit
from animfleet.region.backlog import Backlog
from animfleet.region.broker_outbox import BrokerOutbox
from animfleet.region.catalog import ModelCatalog
from animfleet.region.handoff import Handoff
from animfleet.region.handoff_take import HandoffSettings
from animfleet.region.joblogs import keep_job_logs_of
from animfleet.region.jobstore import (
    IdempotencyConflict,
    JobNotFound,
    JobStore,
    expire_if_overdue,
)
from animfleet.region.status import read_region_status
from animfleet.region.tenants import Tenants
from animfleet.settings import EnvSettings, load
from animfleet.topology import Topology
from dispatcher import metrics
from dispatcher.admission import (
    AdmissionSettings,
    RegionQueue,
    RoutingCache,
    admission_settings_from_env,
)
from dispatcher.outbox_relay import tend_outbox

WEIGHTS_EVERY_S = 5.0
# With the broker apart from the store: how often the lease holder publishes what the outbox
# holds past its grace (and reads the broker's dead letters).
RELAY_EVERY_S = 0.5
# What a spill claim's slot in the target holds: the copy's entry, or the recovering
# scheduler's mark that no copy may be made under that claim any more.
COPIED, REVOKED = "spill-copy", "spill-revoked"
log = structlog.stdlib.get_logger("animfleet.scheduler")


def spill_slot(job_id: str, token: str) -> str:
    """The idempotency key a spill's copy binds in the target: one per claim."""
    return f"spill:{job_id}:{token}"


def _fingerprint(entry: bytes | None) -> str:
    return str(json.loads(entry)["fingerprint"]) if entry else ""


class SchedulerSettings(EnvSettings):
    """``ANIMFLEET_SCHEDULER_<FIELD>``; a bad value names its variable."""

    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_SCHEDULER_")

    poll_s: float = Field(default=0.1, gt=0, le=5)  # between passes: the freed-GPU delay
    lease_s: float = Field(default=5.0, gt=0)  # a dead scheduler's region waits this long
    batch: int = Field(default=100, ge=1)  # most jobs moved per script call
    spill: bool = True  # move backlog jobs to other regions with room
    # A broker apart from the store: a dead-lettered job that started this often (as the
    # workers' own setting) fails; an outbox entry overdue this long is logged as an error.
    max_deliveries: int = Field(default=3, ge=1, le=20)
    outbox_stale_after_s: float = Field(default=60.0, gt=0)
    claim_timeout_s: float = Field(default=30.0, gt=0)  # a spill older than this was abandoned
    # The hand-off when saturated: an idle worker gets, among the first ``handoff_window``
    # jobs of the tenant whose turn it is, the one it holds warm; a job passed over
    # ``handoff_bypass_limit`` times is taken next (the bound on affinity's delay, in hand-offs).
    handoff: bool = True
    handoff_window: int = Field(default=HandoffSettings.window, ge=1, le=256)
    handoff_bypass_limit: int = Field(default=HandoffSettings.bypass_limit, ge=0)
    # A tenant may take up to this many jobs out of turn (held warm by a freed worker), paid
    # back from its next turns.
    handoff_borrow: int = Field(default=HandoffSettings.borrow, ge=0)
    # Fair-share weights, "tenant:weight,..." (a tenant not listed weighs 1); unset leaves the
    # weights stored in the region as they are.
    weights: dict[str, float] | None = None

    @field_validator("weights", mode="before")
    @classmethod
    def _parse_weights(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        pairs = [item.strip().rpartition(":") for item in value.split(",") if item.strip()]
        if any(not tenant or not weight for tenant, _, weight in pairs):
            raise ValueError("weights are tenant:weight pairs, e.g. acme:2,beta:1")
        return {tenant: weight for tenant, _, weight in pairs}

    @field_validator("weights")
    @classmethod
    def _positive(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None and any(weight <= 0 for weight in value.values()):
            raise ValueError(f"every weight must be > 0, got {value}")
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SchedulerSettings:
        """Raises :class:`animfleet.settings.SettingsError`."""
        return load(cls, env)


class RegionScheduler:
    """Moves one region's backlog; :meth:`pump` is one pass."""

    def __init__(
        self,
        topology: Topology,
        region: str,
        settings: SchedulerSettings,
        admission: AdmissionSettings,
        routing: RoutingCache | None = None,
        owner: str | None = None,
    ) -> None:
        self.topology, self.region, self.settings = topology, region, settings
        self.admission, self.routing = admission, routing
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self)}"
        self._stores: dict[str, JobStore] = {}
        self._queues: dict[str, RegionQueue] = {}
        self.handoff = Handoff(
            self.store(region).redis,
            region,
            topology.region(region).queue,
            admission.allowance,
            HandoffSettings(
                settings.handoff,
                settings.handoff_window,
                settings.handoff_bypass_limit,
                settings.handoff_borrow,
            ),
            outbox=not topology.region(region).store_is_broker,
        )
        self._checked_claims = 0.0
        self.outbox: BrokerOutbox | None = None
        if not topology.region(region).store_is_broker:
            self.outbox = BrokerOutbox(self.store(region), topology.region(region))
        self._relayed = 0.0

    def store(self, region: str) -> JobStore:
        if region not in self._stores:
            url = self.topology.region(region).store
            self._stores[region] = JobStore.from_url(url, retry_s=2.0)
        return self._stores[region]

    def pump(self) -> tuple[int, int]:
        """One pass: (jobs moved, backlog left); (0, 0) while another scheduler holds the lease."""
        if not self.handoff.hold_lease(self.owner, self.settings.lease_s):
            return 0, 0
        now = time.monotonic()
        if now - self._checked_claims > self.settings.claim_timeout_s / 3:
            self._checked_claims = now
            self.recover_claims()
        taken = self.handoff.move_home(self.settings.batch)
        if self.outbox is not None:
            self.outbox.deliver(taken.outbox_entries)
            if now - self._relayed >= RELAY_EVERY_S:
                self._relayed = now
                stale_s = self.settings.outbox_stale_after_s
                tend_outbox(self.outbox, self.settings.max_deliveries, stale_s)
        self._expire(self.region, taken.overdue)
        moved, left = len(taken.jobs), taken.remaining
        if taken.jobs:
            metrics.BACKLOG_MOVES.labels(self.region, self.region).inc(len(taken.jobs))
        if left and self.settings.spill:
            spilled, left = self._spill(left)
            moved += spilled
        return moved, left

    # -- spillover -----------------------------------------------------------------------------
    def _spill(self, left: int) -> tuple[int, int]:
        table = self.routing.snapshot().table if self.routing else None
        # Sibling cells first, with or without a table: a move within the region costs no
        # distance. Then the regions the table sends this one's traffic to, then its fallback.
        candidates = self.topology.siblings(self.region)
        if table is not None:
            candidates += [t for t in table.targets(self.region) if t != self.region]
            candidates += list(table.fallback.get(self.region, ()))
        candidates = list(dict.fromkeys(candidates))
        # A region with no live worker runs none of its backlog: it waits in a neighbour's instead.
        stranded = self._live_workers(self.region) == 0
        moved = 0
        for target in candidates:
            room = self._room(target, stranded)
            if room <= 0 or left <= 0:
                continue
            taken = self.handoff.claim(target, min(room, self.settings.batch))
            self._expire(self.region, taken.overdue)
            left = taken.remaining
            for job_id in taken.jobs:
                moved += self._move_abroad(job_id, target, taken.token, into_backlog=stranded)
        return moved, left

    def _live_workers(self, region: str) -> int:
        store = self.store(region)
        return read_region_status(store.redis, self.topology.region(region)).load.live_workers

    def _room(self, target: str, stranded: bool = False) -> int:
        """Jobs ``target`` can start now; none while it has a backlog of its own. For a
        ``stranded`` region (no live worker), a batch whenever ``target`` has live workers."""
        store = self.store(target)
        load = read_region_status(store.redis, self.topology.region(target)).load
        if stranded and load.live_workers:
            return self.settings.batch
        if Backlog(store.redis, target).depth():
            return 0
        return admission_limit(load.live_workers, self.admission.allowance) - load.in_flight

    def _move_abroad(self, job_id: str, target: str, token: str, into_backlog: bool = False) -> int:
        """Copy a claimed job into ``target`` (its GPU queue, or with ``into_backlog`` its
        backlog when no GPU is free), then point the home record there.

        The copy binds the claim's slot in the target (:func:`spill_slot`); a scheduler that
        recovered this claim meanwhile bound it first, and then no copy is made.
        """
        home = self.store(self.region)
        try:
            record = home.get(job_id)
        except JobNotFound:
            self.handoff.forward(job_id, self.region, target, token)  # drops the claim
            return 0
        image = home.input_image(job_id)
        if record.status is not JobState.QUEUED or image is None:
            self.handoff.forward(job_id, self.region, target, token)  # ended: drop the claim
            return 0
        version = record.params.model_version
        if (
            version is not None
            and ModelCatalog(self.store(target).redis, target).get(version) is None
        ):
            self.handoff.give_back(job_id, token)  # its version is not in that region's registry
            return 0
        copy = record.model_copy(update={"region": target})
        slot = JobStore.idempotency_slot(spill_slot(job_id, token))
        entry = JobStore.idempotency_entry(job_id, target, COPIED)
        # Without into_backlog, only onto a GPU queue there (a region with a backlog of its own
        # has no room): FULL, and the job goes back to this backlog.
        answer = self.queue(target).admit(
            copy, image, idempotency=[slot], idempotency_entry=entry, backlog=into_backlog
        )
        if answer.outcome in (AdmissionOutcome.FULL, AdmissionOutcome.CAPPED):
            self.handoff.give_back(job_id, token)
            return 0
        if answer.outcome is AdmissionOutcome.REPEAT and _fingerprint(answer.earlier) != COPIED:
            log.warning("backlog.spill_fenced", job_id=job_id, region=self.region, target=target)
            return 0  # the claim was recovered by another scheduler while this one stalled
        return self._finish_move(job_id, target, token)

    def _finish_move(self, job_id: str, target: str, token: str) -> int:
        forwarded, status = self.handoff.forward(job_id, self.region, target, token)
        if forwarded:
            metrics.BACKLOG_MOVES.labels(self.region, target).inc()
            metrics.SPILLOVER.labels(self.region, target).inc()
            log.info("backlog.spilled", job_id=job_id, region=self.region, target=target)
            return 1
        if status in {state.value for state in JobState if state.terminal}:
            self._end_copy(job_id, target)  # canceled or expired at home while it moved
        return 0

    def _end_copy(self, job_id: str, target: str) -> None:
        home_record = self.store(self.region).get(job_id)

        def same_end(record: JobRecord) -> None:
            if not record.status.terminal and home_record.error is not None:
                record.end(home_record.status, home_record.error.code, home_record.error.message)

        with contextlib.suppress(JobNotFound, IllegalTransition):
            self.store(target).update(job_id, same_end)

    def recover_claims(self) -> None:
        """Finish or give back spills a scheduler left half-done (it died or stalled).

        Binding the claim's slot in the target first fences the stalled scheduler out: if the
        slot was free, no copy was made under the claim and none can be now, so the job goes
        back to the backlog; if the copy holds it, the move is finished.
        """
        cutoff = time.time() - self.settings.claim_timeout_s
        for claim in self.handoff.claims().values():
            if claim.at > cutoff:
                continue
            slot = spill_slot(claim.job_id, claim.token)
            try:  # bound now, or by an earlier recovery that stopped before the give-back
                self.store(claim.target).claim_idempotency_key(
                    slot, claim.job_id, self.region, REVOKED
                )
                revoked = True
            except IdempotencyConflict:  # the copy's entry holds the slot: the target has it
                revoked = False
            if revoked:
                self.handoff.give_back(claim.job_id, claim.token)
            else:
                self._finish_move(claim.job_id, claim.target, claim.token)

    def queue(self, region: str) -> RegionQueue:
        """``region``'s admission, as a dispatcher's submit uses it (placement included)."""
        if region not in self._queues:
            self._queues[region] = RegionQueue(
                self.topology.region(region),
                self.store(region),
                self.admission.allowance,
                affinity=self.admission.affinity,
            )
        return self._queues[region]

    def _expire(self, region: str, job_ids: list[str]) -> None:
        """End backlog jobs found past their start deadline ``expired``, without a GPU."""
        now = time.time()
        for job_id in job_ids:
            try:
                self.store(region).update(job_id, lambda record: expire_if_overdue(record, now))
            except (JobNotFound, IllegalTransition):
                continue
            log.info("backlog.expired", job_id=job_id, region=region)

    def refresh_weights(self) -> None:
        """Fair-share weights: each tenant's own (``animfleet keys limits``), then the
        process's ``ANIMFLEET_SCHEDULER_WEIGHTS``, which win."""
        weights = Tenants(self.store(self.region).redis).weights()
        weights.update(self.settings.weights or {})
        self.handoff.backlog.set_weights(weights)

    def run(self, stop: threading.Event) -> None:
        weights_due = 0.0
        while not stop.is_set():
            if time.monotonic() >= weights_due:  # a tenant's new weight counts within seconds
                weights_due = time.monotonic() + WEIGHTS_EVERY_S
                try:
                    self.refresh_weights()
                except Exception as error:  # as a failed pass: try again next time
                    log.warning("scheduler.weights_failed", region=self.region, error=str(error))
            try:
                moved, left = self.pump()
            except Exception as error:  # a Redis blip: keep the process, try again next pass
                log.warning("scheduler.pass_failed", region=self.region, error=str(error))
                moved, left = 0, 0
            if not (moved and left):  # moved some and more wait: go again at once
                stop.wait(self.settings.poll_s)
        self.handoff.release_lease(self.owner)


def run_scheduler(
    topology: Topology,
    regions: list[str],
    settings: SchedulerSettings | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Schedule ``regions`` (one thread each) until ``stop`` is set (or forever)."""
    settings = settings or SchedulerSettings.from_env()
    admission = admission_settings_from_env()
    if port := port_from_env("ANIMFLEET_SCHEDULER_METRICS_PORT"):
        serve(port)
    stop = stop or threading.Event()
    keep_job_logs_of(topology, topology.names)  # a spilled job's lines go to its new region
    threads = []
    for region in regions:
        scheduler = RegionScheduler(topology, region, settings, admission)
        routing = RoutingCache(scheduler.store(region).redis, topology.names)
        routing.start()
        scheduler.routing = routing
        thread = threading.Thread(target=scheduler.run, args=(stop,), name=f"scheduler-{region}")
        thread.start()
        threads.append((thread, routing))
    log.info("scheduler.started", regions=regions, poll_s=settings.poll_s)
    for thread, routing in threads:
        thread.join()
        routing.stop()
