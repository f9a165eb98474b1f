"""A worker's heartbeat: its state published to the region's worker registry, every second.

The registry (:class:`animfleet.region.workers.WorkerRegistry`) scores each entry by the time
it lapses, so a worker that dies stops counting as capacity without anyone noticing the death.
With each beat the worker also claims what it holds warm (add-ons, image templates) and its
direct queue (:mod:`animfleet.region.affinity`), under the same TTL.

Each beat also renews the run lease of the job each slot runs (:mod:`animfleet.region.runs`):
the job's liveness is its own run's, so a pool child killed mid-job lets its job's lease lapse
even though the next pool child heartbeats under the same worker name.

A batch worker publishes one entry per job slot (``<worker>/<slot>``), each idle or busy with
its own job, so the region counts its slots as it counts one-job workers; each slot claims the
worker's holdings and has a direct queue, so placement can hand a job to any idle slot.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import redis

from animfleet.region.affinity import DirectQueues, Holdings
from animfleet.region.jobstore import JobStore
from animfleet.region.runs import Run, RunLeases
from animfleet.region.workers import WorkerRegistry, slot_names


@dataclass
class SlotState:
    """One slot's job (``None``: idle), as the prefetch listener of that slot reads it, and
    the run whose lease the slot's beats renew once the job started."""

    job_id: str | None = None
    run: Run | None = None


class Heartbeat:
    """Publishes this worker's state (each of its ``slots``) every ``interval_s`` from a
    daemon thread."""

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
    ) -> None:
        self.client, self.region, self.worker, self.variant = client, region, worker, variant
        self.registry = WorkerRegistry(client, region)
        self.holdings, self.direct = holdings, direct
        self.claims = Holdings(client, region)
        self.runs = RunLeases(JobStore(client))
        self.interval_s, self.ttl_s = interval_s, ttl_s
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
            self.slots[slot].run = run

    def beat(self) -> None:
        for slot in range(len(self.members)):
            self._beat_slot(slot)

    def _beat_slot(self, slot: int) -> None:
        member = self.members[slot]
        with self._lock:  # a slot's idle beat must not land after its next busy one
            job_id, run = self.slots[slot].job_id, self.slots[slot].run
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

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except redis.RedisError:
                continue  # the broker is briefly away; lapsing is the right signal
