"""A worker's heartbeat: its state in the region's Redis, under entries that expire.

Two sorted sets per region hold worker names scored by the time their heartbeat lapses:
``workers:<region>`` (alive) and ``busy:<region>`` (alive and running a job). Counting the
members whose score lies in the future gives live and busy GPUs in one command, inside a Lua
script too, so a worker that dies stops counting as capacity within ``ttl_s`` without anything
having to notice the death. A JSON key per worker carries the details (job, variant, pid).
"""

from __future__ import annotations

import json
import os
import threading
import time

import redis

from animfleet.constants import BUSY_SET, WORKER_KEY, WORKER_SET


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
    ) -> None:
        self.client, self.region, self.worker, self.variant = client, region, worker, variant
        self.key = f"{WORKER_KEY}{region}:{worker}"
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
        with self.client.pipeline() as pipe:
            pipe.delete(self.key)
            pipe.zrem(WORKER_SET + self.region, self.worker)
            pipe.zrem(BUSY_SET + self.region, self.worker)
            pipe.execute()

    def busy(self, job_id: str | None) -> None:
        """Mark the worker busy with ``job_id`` (or idle with ``None``) and publish at once."""
        self.job_id = job_id
        self.beat()

    def beat(self) -> None:
        now = time.time()
        lapses = now + self.ttl_s
        state = {
            "worker": self.worker,
            "state": "busy" if self.job_id else "idle",
            "job_id": self.job_id,
            "variant": self.variant,
            "pid": os.getpid(),
            "at": now,
        }
        with self.client.pipeline() as pipe:
            pipe.set(self.key, json.dumps(state), px=int(self.ttl_s * 1000))
            pipe.zadd(WORKER_SET + self.region, {self.worker: lapses})
            if self.job_id:
                pipe.zadd(BUSY_SET + self.region, {self.worker: lapses})
            else:
                pipe.zrem(BUSY_SET + self.region, self.worker)
            # Lapsed members are dropped by whoever writes, so the sets stay small.
            pipe.zremrangebyscore(WORKER_SET + self.region, "-inf", now)
            pipe.zremrangebyscore(BUSY_SET + self.region, "-inf", now)
            pipe.execute()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except redis.RedisError:
                continue  # the broker is briefly away; lapsing is the right signal


def live_workers(client: redis.Redis, region: str) -> list[dict[str, object]]:
    """The heartbeat details of ``region``'s workers that are alive now."""
    names: list[bytes] = client.zrangebyscore(WORKER_SET + region, time.time(), "+inf")  # type: ignore[assignment]
    if not names:
        return []
    keys = [f"{WORKER_KEY}{region}:{name.decode()}" for name in names]
    return [json.loads(raw) for raw in client.mget(keys) if raw is not None]
