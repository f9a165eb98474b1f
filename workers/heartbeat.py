"""A worker's heartbeat: its state published to the region's worker registry, every second.

The registry (:class:`animfleet.region.workers.WorkerRegistry`) scores each entry by the time
it lapses, so a worker that dies stops counting as capacity without anyone noticing the death.
With each beat the worker also claims what it holds warm (add-ons, image templates) and its
direct queue (:mod:`animfleet.region.affinity`), under the same TTL.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable

import redis

from animfleet.region.affinity import DirectQueues, Holdings
from animfleet.region.workers import WorkerRegistry


class Heartbeat:
    """Publishes this worker's state every ``interval_s`` from a daemon thread."""

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
    ) -> None:
        self.client, self.region, self.worker, self.variant = client, region, worker, variant
        self.registry = WorkerRegistry(client, region)
        self.holdings, self.direct = holdings, direct
        self.claims = Holdings(client, region)
        self.interval_s, self.ttl_s = interval_s, ttl_s
        self.job_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        """Leave the fleet at once (warm shutdown), rather than after the TTL."""
        self._stop.set()
        self.registry.leave(self.worker)

    def busy(self, job_id: str | None) -> None:
        """Mark the worker busy with ``job_id`` (or idle with ``None``) and publish at once."""
        self.job_id = job_id
        self.beat()

    def beat(self) -> None:
        state = {
            "worker": self.worker,
            "state": "busy" if self.job_id else "idle",
            "job_id": self.job_id,
            "variant": self.variant,
            "pid": os.getpid(),
            "at": time.time(),
        }
        live = self.registry.beat(self.worker, state, self.ttl_s, busy=self.job_id is not None)
        if not live:  # draining: claim nothing, so no job is placed on this worker
            return
        if self.direct is not None:  # re-registered each beat: a sweep may have dropped it
            self.direct.register(self.worker)
        if self.holdings is not None:
            self.claims.publish(self.worker, self.holdings(), self.ttl_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except redis.RedisError:
                continue  # the broker is briefly away; lapsing is the right signal
