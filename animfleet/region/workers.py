"""A region's GPU workers as its Redis knows them: heartbeats under entries that expire.

Two sorted sets per region hold worker names scored by the time their heartbeat lapses:
``workers:<region>`` (alive) and ``busy:<region>`` (alive and running a job). Counting the
members whose score lies in the future gives live and busy GPUs in one command, inside a Lua
script too, so a worker that dies stops counting as capacity within its TTL without anything
having to notice the death. A JSON key per worker carries the details (job, variant, pid).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from animfleet.region.keys import BUSY_SET, WORKER_KEY, WORKER_SET


class WorkerRegistry:
    """The heartbeat entries of one region's workers."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.live_key, self.busy_key = WORKER_SET + region, BUSY_SET + region

    def detail_key(self, worker: str) -> str:
        return f"{WORKER_KEY}{self.region}:{worker}"

    def beat(self, worker: str, details: dict[str, Any], ttl_s: float, busy: bool) -> None:
        """Publish ``worker`` as alive (and busy or idle) until ``ttl_s`` from now."""
        now = time.time()
        lapses = now + ttl_s
        with self.redis.pipeline() as pipe:
            pipe.set(self.detail_key(worker), json.dumps(details), px=int(ttl_s * 1000))
            pipe.zadd(self.live_key, {worker: lapses})
            if busy:
                pipe.zadd(self.busy_key, {worker: lapses})
            else:
                pipe.zrem(self.busy_key, worker)
            # Lapsed members are dropped by whoever writes, so the sets stay small.
            pipe.zremrangebyscore(self.live_key, "-inf", now)
            pipe.zremrangebyscore(self.busy_key, "-inf", now)
            pipe.execute()

    def leave(self, worker: str) -> None:
        """Take ``worker`` out of the region's capacity at once, rather than after its TTL."""
        with self.redis.pipeline() as pipe:
            pipe.delete(self.detail_key(worker))
            pipe.zrem(self.live_key, worker)
            pipe.zrem(self.busy_key, worker)
            pipe.execute()

    def live(self) -> list[dict[str, Any]]:
        """The heartbeat details of the workers that are alive now."""
        names: list[bytes] = self.redis.zrangebyscore(self.live_key, time.time(), "+inf")  # type: ignore[assignment]
        if not names:
            return []
        keys = [self.detail_key(name.decode()) for name in names]
        return [json.loads(raw) for raw in self.redis.mget(keys) if raw is not None]


def live_workers(client: redis.Redis, region: str) -> list[dict[str, Any]]:
    """The heartbeat details of ``region``'s workers that are alive now."""
    return WorkerRegistry(client, region).live()
