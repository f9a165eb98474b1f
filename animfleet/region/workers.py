"""A region's GPU workers as its Redis knows them: heartbeats under entries that expire.

Two sorted sets per region hold worker names scored by the time their heartbeat lapses:
``workers:<region>`` (alive) and ``busy:<region>`` (alive and running a job). Counting the
members whose score lies in the future gives live and busy GPUs in one command, inside a Lua
script too, so a worker that dies stops counting as capacity within its TTL without anything
having to notice the death. A JSON key per worker carries the details (job, variant, pid).

A batch worker (one that runs up to N jobs in one batched loop) heartbeats N slot members,
``<worker>/0`` .. ``<worker>/N-1``, each live and, while it holds a job, busy: every count of
the sets is then a count of job slots, and a job record names the slot that runs it, whose
details key tells the sweeper whether it is still there.

A worker told to stop (SIGTERM, a warm shutdown) is marked draining: it leaves both sets at
once, and its own heartbeats no longer put it back, so no dispatcher admits to it while it
finishes the job it has.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from animfleet.region.keys import BUSY_SET, DIRECT_CLAIMS, DRAINING_KEY, WORKER_KEY, WORKER_SET

# KEYS: details, live set, busy set, draining mark, direct claims. ARGV: details json, ttl ms,
# now, lapses, busy (1/0). A draining worker keeps its details fresh but stays out of both sets.
# A busy beat also ends the worker's direct claim (a job handed to it through the broker outbox,
# counted as queued for it until it starts): from now on the busy set says it has a job.
_BEAT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('ZREM', KEYS[2], ARGV[6])
  redis.call('ZREM', KEYS[3], ARGV[6])
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[6])
  redis.call('HDEL', KEYS[5], ARGV[6])
else
  redis.call('ZREM', KEYS[3], ARGV[6])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[3])
return 1
"""


def slot_names(worker: str, slots: int) -> list[str]:
    """The registry members of a worker with ``slots`` job slots: its own name for one slot
    (a one-job-per-GPU worker), else ``<worker>/0`` .. ``<worker>/<slots-1>``."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    return [worker] if slots == 1 else [f"{worker}/{index}" for index in range(slots)]


class WorkerRegistry:
    """The heartbeat entries of one region's workers."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.live_key, self.busy_key = WORKER_SET + region, BUSY_SET + region
        self._beat = client.register_script(_BEAT)

    def detail_key(self, worker: str) -> str:
        return f"{WORKER_KEY}{self.region}:{worker}"

    def draining_key(self, worker: str) -> str:
        return f"{DRAINING_KEY}{self.region}:{worker}"

    def beat(self, worker: str, details: dict[str, Any], ttl_s: float, busy: bool) -> bool:
        """Publish ``worker`` as alive (and busy or idle) until ``ttl_s`` from now; returns
        False (and publishes only its details) while it is draining."""
        now = time.time()
        keys = [
            self.detail_key(worker),
            self.live_key,
            self.busy_key,
            self.draining_key(worker),
            DIRECT_CLAIMS + self.region,
        ]
        args: list[str | int | float] = [
            json.dumps(details),
            int(ttl_s * 1000),
            now,
            now + ttl_s,
            int(busy),
            worker,
        ]
        return bool(self._beat(keys=keys, args=args))

    def drain(self, worker: str, for_s: float, slots: int = 1) -> None:
        """Take ``worker`` (each of its ``slots``) out of the capacity count now and keep it
        out for ``for_s`` (longer than its running jobs can take), while it finishes them."""
        with self.redis.pipeline() as pipe:
            for member in slot_names(worker, slots):
                pipe.set(self.draining_key(member), time.time(), px=int(for_s * 1000))
                pipe.zrem(self.live_key, member)
                pipe.zrem(self.busy_key, member)
            pipe.execute()

    def present(self, worker: str) -> bool:
        """Alive or draining: its heartbeat details have not expired (a lost host's have)."""
        return bool(self.redis.exists(self.detail_key(worker)))

    def is_live(self, worker: str) -> bool:
        """Whether ``worker``'s heartbeat is current (draining workers are not)."""
        score = self.redis.zscore(self.live_key, worker)
        return score is not None and score > time.time()

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
