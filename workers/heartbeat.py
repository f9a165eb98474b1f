"""A worker's heartbeat: its state published to the region's worker registry, every second.

The registry (:class:`animfleet.region.workers.WorkerRegistry`) scores each entry by the time
it lapses, so a worker that dies stops counting as capacity without anyone noticing the death.
With each beat the worker also claims what it holds warm (add-ons, image templates) and its
direct queue (:mod:`animfleet.region.affinity`), under the same TTL.

Each beat also renews the run lease of the job each slot runs (:mod:`animfleet.region.runs`):
the job's liveness is its own run's, so a pool child killed mid-job lets its job's lease lapse
even though the next pool child heartbeats under the same worker name.

The beat thread never dies quietly. A store error only skips the beat (the store is away: the
entries lapse, which is the right signal). Any other exception is logged and the loop goes on,
backing off; if beats keep failing that way for a whole TTL, the worker's leases are lapsing
while it would go on taking jobs, so the process stops instead (:func:`stop_process`) and its
supervisor starts a fresh one. The same happens to a slot whose run is still held past the hard
time limit (a hung batch slot: the thread pool enforces no limit): the beat stops renewing that
run's lease, so the sweeper takes the job over, and the process stops.

A batch worker publishes one entry per job slot (``<worker>/<slot>``), each idle or busy with
its own job, so the region counts its slots as it counts one-job workers; each slot claims the
worker's holdings and has a direct queue, so placement can hand a job to any idle slot.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import redis
import structlog

from animfleet.errors import TransientError
from animfleet.region.affinity import DirectQueues, Holdings
from animfleet.region.jobstore import JobStore
from animfleet.region.runs import Run, RunLeases
from animfleet.region.workers import WorkerRegistry, slot_names
from workers.errors import WorkerError

log = structlog.stdlib.get_logger("animfleet.worker.heartbeat")

# The exit status of a worker process stopped by its heartbeat (EX_SOFTWARE): its supervisor
# (Celery's pool for a pool child, the process manager for the worker) starts it again.
EXIT_HEARTBEAT_LOST = 70


def stop_process(reason: str) -> None:
    """Stop this process at once: it can no longer vouch for the jobs it holds."""
    log.critical("worker.heartbeat_lost", reason=reason, pid=os.getpid())
    os._exit(EXIT_HEARTBEAT_LOST)


@dataclass
class SlotState:
    """One slot's job (``None``: idle), as the prefetch listener of that slot reads it, and
    the run whose lease the slot's beats renew once the job started."""

    job_id: str | None = None
    run: Run | None = None
    held_since: float = 0.0  # monotonic time the run's lease was first held


class Heartbeat:
    """Publishes this worker's state (each of its ``slots``) every ``interval_s`` from a
    daemon thread; ``on_fatal`` (by default :func:`stop_process`) is called with a reason when
    the worker must stop (see the module docstring). ``hard_limit_s``: how long one run may
    hold its slot (None: no limit)."""

    def __init__(
        self,
        client: redis.Redis,
        region: str,
        worker: str,
        variant: str,
        interval_s: float = 1.0,
        ttl_s: float = 5.0,  # survives a few missed beats on a loaded host
        holdings: Callable[[], Iterable[str]] | None = None,
        direct: DirectQueues | None = None,
        slots: int = 1,
        hard_limit_s: float | None = None,
        on_fatal: Callable[[str], None] = stop_process,
    ) -> None:
        self.client, self.region, self.worker, self.variant = client, region, worker, variant
        self.registry = WorkerRegistry(client, region)
        self.holdings, self.direct = holdings, direct
        self.claims = Holdings(client, region)
        self.runs = RunLeases(JobStore(client))
        self.interval_s, self.ttl_s = interval_s, ttl_s
        self.hard_limit_s, self.on_fatal = hard_limit_s, on_fatal
        self.failures = 0  # beats in a row that failed with something else than a store error
        self.members = slot_names(worker, slots)
        self.slots = [SlotState() for _ in self.members]
        self._claimed: list[set[str]] = [set() for _ in self.members]  # per slot, last beat's
        self.job_id: str | None = None  # slot 0's: the job of a one-slot worker
        self._lock = threading.Lock()  # task threads of a batch worker mark their own slots
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        """Leave the fleet at once (warm shutdown), rather than after the TTL."""
        self._stop.set()
        for member in self.members:
            self.registry.leave(member)

    def busy(self, job_id: str | None, slot: int = 0) -> None:
        """Mark ``slot`` busy with ``job_id`` (or idle with ``None``) and publish it at once."""
        self.slots[slot].job_id, self.slots[slot].run = job_id, None
        if slot == 0:
            self.job_id = job_id
        self._beat_slot(slot)

    def hold(self, run: Run, slot: int = 0) -> None:
        """Renew ``run``'s lease with every beat of ``slot`` from now until the slot is idle."""
        with self._lock:
            self.slots[slot].run, self.slots[slot].held_since = run, time.monotonic()

    def beat(self) -> None:
        for slot in range(len(self.members)):
            self._beat_slot(slot)

    def _beat_slot(self, slot: int) -> None:
        member = self.members[slot]
        with self._lock:  # a slot's idle beat must not land after its next busy one
            job_id, run = self.slots[slot].job_id, self.slots[slot].run
            if run is not None and self._overdue(self.slots[slot]):
                # A hung run: its lease lapses, the sweeper ends or requeues its job.
                raise SlotHung(f"{member} held job {run.job_id} past {self.hard_limit_s}s")
            if run is not None:  # False: fenced off or lapsed; the run's next write finds out
                self.runs.renew(run, self.ttl_s)
            state = {
                "worker": member,
                "state": "busy" if job_id else "idle",
                "job_id": job_id,
                "variant": self.variant,
                "pid": os.getpid(),
                "at": time.time(),
            }
            if len(self.members) > 1:
                state.update(host_worker=self.worker, slot=slot, slots=len(self.members))
            live = self.registry.beat(member, state, self.ttl_s, busy=job_id is not None)
        if not live:  # draining: claim nothing, so no job is placed on this worker
            return
        if self.direct is not None:  # re-registered each beat: a sweep may have dropped it
            self.direct.register(member)
        if self.holdings is not None:
            held = set(self.holdings())
            # An evicted thing stops being claimed now, not when its claim lapses: placement
            # would otherwise send jobs to a worker that must load it again.
            if gone := self._claimed[slot] - held:
                self.claims.withdraw(member, gone)
            self.claims.publish(member, held, self.ttl_s)
            self._claimed[slot] = held

    def _overdue(self, state: SlotState) -> bool:
        if self.hard_limit_s is None:
            return False
        # Past the hard limit and one TTL more: a prefork pool's own limit kills it first.
        return time.monotonic() - state.held_since > self.hard_limit_s + self.ttl_s

    def _loop(self) -> None:
        failing_since: float | None = None
        while not self._stop.wait(self._pause()):
            try:
                self.beat()
            except redis.RedisError:
                failing_since = None  # the store is away: lapsing is the right signal
                continue
            except SlotHung as hung:
                self._give_up(str(hung))
                return
            except Exception as error:  # a bug, or a library's: never a silent dead thread
                self.failures += 1
                failing_since = failing_since or time.monotonic()
                if self.failures == 1 or self.failures % 10 == 0:
                    log.exception("heartbeat.beat_failed", failures=self.failures)
                if time.monotonic() - failing_since >= self.ttl_s:
                    self._give_up(f"beats failed for {self.ttl_s}s: {error!r}")
                    return
                continue
            if failing_since is not None:
                failing_s = round(time.monotonic() - failing_since, 3)
                log.info("heartbeat.recovered", failures=self.failures, failing_s=failing_s)
            self.failures, failing_since = 0, None

    def _pause(self) -> float:
        """The next beat's wait: backing off while beats fail, to at most a quarter TTL (the run
        leases renewed before the failing part still hold)."""
        if not self.failures:
            return self.interval_s
        backoff: float = self.interval_s * 2.0 ** (self.failures - 1)
        return min(backoff, self.ttl_s / 4)

    def _give_up(self, reason: str) -> None:
        self._stop.set()
        for member in self.members:  # out of the capacity count now, if the store answers
            with contextlib.suppress(Exception):
                self.registry.leave(member)
        self.on_fatal(reason)


class SlotHung(WorkerError, TransientError):
    """A slot's run is still held past the hard time limit."""
