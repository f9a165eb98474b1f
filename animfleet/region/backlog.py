"""A region's durable backlog: jobs accepted while no GPU can take them, waiting fairly.

Admission is one script (:meth:`Backlog.admit`): a job that can start now (a GPU free under the
allowance and no backlog ahead of it) goes straight onto the GPU queue exactly as
:meth:`animfleet.region.jobstore.JobStore.admit` would put it; otherwise, when the caller asks
for it, the record, its input and its Celery message are stored and the job joins its tenant's
queue in the backlog, all in the same atomic call. Jobs leave the backlog only through
:mod:`animfleet.region.handoff`.

Per tenant, a sorted set orders jobs by priority (higher first) then submission time. Tenants
with jobs form a ring served by deficit round robin with per-tenant weights. The job record
stays the truth: a canceled or expired job left in these sets is skipped when it is popped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from animfleet.jobs import MAX_PRIORITY, JobRecord
from animfleet.region.keys import (
    BACKLOG_ACTIVE,
    BACKLOG_ALL,
    BACKLOG_BYPASS,
    BACKLOG_MESSAGE,
    BACKLOG_RING,
    BACKLOG_TENANT,
    BACKLOG_WEIGHTS,
    BUSY_SET,
    HOLDING_SET,
    INPUT_KEY,
    INPUT_TTL_S,
    JOB_KEY,
    QUEUED_SET,
    RECORD_TTL_S,
    START_BY_SET,
    WORKER_SET,
)

# Outcomes beyond JobStore's ADMITTED (1), FULL (0), EXISTS (-1) and REPEAT (2).
BACKLOGGED, CAPPED = 3, 4
# Orders a tenant's jobs by priority, then created_at (unix seconds stay below this).
PRIORITY_STRIDE = 1e10
DEFAULT_WEIGHT = 1.0

# KEYS: workers, busy, queued, start-by, record, input, GPU queue, holding set of the home
#       region, backlog-all, the tenant's backlog, messages, ring, active, idempotency keys...
# ARGV: now, allowance ('' = none), record json, image, record ttl, input ttl, job id,
#       created at, start-by (or ''), message, idempotency entry, mode ('direct' | 'backlog'),
#       tenant, order score, tenant cap (''), region cap (''), n (preferred workers), their
#       n names, one ttl per idempotency key
# KEYS 14 .. 13 + n are the preferred workers' direct queues, the idempotency keys follow.
# A direct admission goes to the first preferred worker that is live, idle and has nothing in
# its direct queue (the 4th answer says which, 0 for the shared queue KEYS[7]).
_ADMIT = """
local n = tonumber(ARGV[17])
for i = 14 + n, #KEYS do
  local earlier = redis.call('GET', KEYS[i])
  if earlier then return {2, 0, 0, earlier, i - 13 - n} end
end
local now = tonumber(ARGV[1])
local live = redis.call('ZCOUNT', KEYS[1], now, '+inf')
local held = redis.call('ZCOUNT', KEYS[2], now, '+inf') + redis.call('ZCARD', KEYS[3])
local waiting = redis.call('ZCARD', KEYS[9])
local room = ARGV[2] == '' or held < math.floor(live * (1 + tonumber(ARGV[2])) + 1e-9)
local direct = room and waiting == 0
if not direct and ARGV[12] ~= 'backlog' then return {0, live, held} end
if not direct then
  if ARGV[16] ~= '' and waiting >= tonumber(ARGV[16]) then return {4, live, held, 'region'} end
  local mine = redis.call('ZCARD', KEYS[10])
  if ARGV[15] ~= '' and mine >= tonumber(ARGV[15]) then return {4, live, held, 'tenant'} end
end
if not redis.call('SET', KEYS[5], ARGV[3], 'EX', ARGV[5], 'NX') then return {-1, live, held} end
redis.call('SET', KEYS[6], ARGV[4], 'EX', ARGV[6])
if ARGV[9] ~= '' then redis.call('ZADD', KEYS[4], ARGV[9], ARGV[7]) end
redis.call('ZADD', KEYS[8], ARGV[8], ARGV[7])
for i = 14 + n, #KEYS do redis.call('SET', KEYS[i], ARGV[11], 'EX', ARGV[i + 4]) end
if direct then
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
  local chosen = 0
  for c = 1, n do
    local lapse = redis.call('ZSCORE', KEYS[1], ARGV[17 + c])
    local busy = redis.call('ZSCORE', KEYS[2], ARGV[17 + c])
    if lapse and tonumber(lapse) > now and not (busy and tonumber(busy) > now)
        and redis.call('LLEN', KEYS[13 + c]) == 0 then
      chosen = c
      break
    end
  end
  redis.call('LPUSH', chosen > 0 and KEYS[13 + chosen] or KEYS[7], ARGV[10])
  return {1, live, held + 1, chosen}
end
redis.call('ZADD', KEYS[9], ARGV[8], ARGV[7])
redis.call('ZADD', KEYS[10], ARGV[14], ARGV[7])
redis.call('HSET', KEYS[11], ARGV[7], ARGV[10])
if redis.call('SADD', KEYS[13], ARGV[13]) == 1 then redis.call('RPUSH', KEYS[12], ARGV[13]) end
return {3, live, held}
"""


@dataclass(frozen=True)
class BacklogCaps:
    """Most jobs one tenant, and the whole region, may have waiting (``None``: no cap)."""

    tenant: int | None = None
    region: int | None = None


@dataclass(frozen=True)
class BacklogAdmission:
    """What :meth:`Backlog.admit` answered: ``outcome`` is ADMITTED (on the GPU queue),
    BACKLOGGED, FULL (mode ``direct`` only), CAPPED (``cap`` says which), EXISTS or REPEAT
    (then ``earlier`` holds the idempotency entry bound before, ``matched`` its 1-based key)."""

    outcome: int
    live_workers: int
    held: int
    earlier: bytes | None = None
    matched: int = 0
    cap: str = ""
    worker: str | None = None  # the preferred worker whose direct queue took the job


def order_score(priority: int, created_at: float) -> float:
    """A tenant's backlog order: higher priority first, then earlier submission."""
    return (MAX_PRIORITY - priority) * PRIORITY_STRIDE + created_at


class Backlog:
    """One region's backlog in that region's Redis."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.all_key = BACKLOG_ALL + region
        self.message_key = BACKLOG_MESSAGE + region
        self.ring_key, self.active_key = BACKLOG_RING + region, BACKLOG_ACTIVE + region
        self.weights_key = BACKLOG_WEIGHTS + region
        self._admit = client.register_script(_ADMIT)

    def tenant_key(self, tenant: str) -> str:
        return f"{BACKLOG_TENANT}{self.region}:{tenant}"

    def admit(
        self,
        record: JobRecord,
        image: bytes,
        *,
        message: str,
        queue: str,
        allowance: float | None,
        backlog: bool,
        caps: BacklogCaps = BacklogCaps(),
        idempotency: Sequence[tuple[str, int]] = (),
        idempotency_entry: str = "",
        preferred: Sequence[tuple[str, str]] = (),
    ) -> BacklogAdmission:
        """Take ``record`` (of this region) onto its GPU queue if it can start now, else into
        the backlog when ``backlog`` is true; one atomic script either way.

        ``idempotency`` lists (Redis key, ttl) pairs to bind to ``idempotency_entry``.
        ``preferred`` lists (worker, its direct queue), best first: a job that can start now
        goes to the first that is live, idle and has an empty direct queue, else to ``queue``.
        """
        limits = [t for t in (record.start_deadline, record.deadline) if t is not None]
        keys = [
            WORKER_SET + self.region,
            BUSY_SET + self.region,
            QUEUED_SET + self.region,
            START_BY_SET + self.region,
            JOB_KEY + record.id,
            INPUT_KEY + record.id,
            queue,
            HOLDING_SET + record.home_region,
            self.all_key,
            self.tenant_key(record.tenant),
            self.message_key,
            self.ring_key,
            self.active_key,
            *(direct for _, direct in preferred),
            *(key for key, _ in idempotency),
        ]
        args: list[Any] = [
            repr(time.time()),
            "" if allowance is None else repr(allowance),
            record.model_dump_json(),
            image,
            RECORD_TTL_S,
            INPUT_TTL_S,
            record.id,
            repr(record.created_at),
            repr(min(limits)) if limits else "",
            message,
            idempotency_entry,
            "backlog" if backlog else "direct",
            record.tenant,
            repr(order_score(record.priority, record.created_at)),
            "" if caps.tenant is None else caps.tenant,
            "" if caps.region is None else caps.region,
            len(preferred),
            *(worker for worker, _ in preferred),
            *(ttl for _, ttl in idempotency),
        ]
        answer = self._admit(keys=keys, args=args)
        outcome = int(answer[0])
        if outcome == 2:  # REPEAT
            return BacklogAdmission(outcome, 0, 0, earlier=answer[3], matched=int(answer[4]))
        cap = answer[3].decode() if outcome == CAPPED else ""
        chosen = int(answer[3]) if outcome == 1 else 0
        worker = preferred[chosen - 1][0] if chosen else None
        return BacklogAdmission(outcome, int(answer[1]), int(answer[2]), cap=cap, worker=worker)

    # -- what users and the autoscaler see -------------------------------------------------
    def depth(self) -> int:
        """Jobs waiting in the backlog (a canceled one counts until it is skipped)."""
        return int(self.redis.zcard(self.all_key))

    def contains(self, job_id: str) -> bool:
        return self.redis.zscore(self.all_key, job_id) is not None

    def waiting(self, most: int = 10_000) -> list[str]:
        """Ids of the jobs waiting in the backlog, oldest first."""
        raw: list[bytes] = self.redis.zrange(self.all_key, 0, most - 1)  # type: ignore[assignment]
        return [item.decode() for item in raw]

    def remove(self, job_id: str, tenant: str, pipe: redis.client.Pipeline | None = None) -> None:
        """Drop a job that ended while waiting (canceled, expired) at once, rather than when
        popped; with ``pipe``, inside the caller's transaction (the one that ends it)."""
        if pipe is not None:
            pipe.zrem(self.tenant_key(tenant), job_id)
            pipe.zrem(self.all_key, job_id)
            pipe.hdel(self.message_key, job_id)
            pipe.hdel(BACKLOG_BYPASS + self.region, job_id)
            return
        with self.redis.pipeline(transaction=True) as own:
            self.remove(job_id, tenant, own)
            own.execute()

    def jobs_ahead(self, job_id: str, tenant: str, max_tenants: int = 100) -> int | None:
        """About how many backlog jobs start before ``job_id``; ``None`` if it is not waiting.

        Its own tenant's jobs ahead of it, plus for each other tenant as many jobs as deficit
        round robin serves them in the same number of turns (in proportion to the weights).
        """
        rank = self.redis.zrank(self.tenant_key(tenant), job_id)
        if not isinstance(rank, int):
            return None
        ring: list[bytes] = self.redis.lrange(self.ring_key, 0, max_tenants - 1)  # type: ignore[assignment]
        tenants = [t.decode() for t in ring]
        others = [t for t in tenants if t != tenant]
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self.weights_key, [tenant, *others])
            for other in others:
                pipe.zcard(self.tenant_key(other))
            raw_weights, *counts = pipe.execute()
        weights = [float(w) if w is not None else DEFAULT_WEIGHT for w in raw_weights]
        turns = (rank + 1) / max(weights[0], 1e-9)
        ahead = rank
        for weight, count in zip(weights[1:], counts, strict=True):
            ahead += min(int(count), math.floor(turns * weight))
        return ahead

    def oldest_age_s(self, now: float | None = None) -> float:
        oldest = self.redis.zrange(self.all_key, 0, 0, withscores=True)
        now = time.time() if now is None else now
        return max(0.0, now - float(oldest[0][1])) if oldest else 0.0

    # -- fair-share weights ------------------------------------------------------------------
    def set_weights(self, weights: dict[str, float]) -> None:
        """Replace the tenants' weights (a tenant not listed weighs 1)."""
        for tenant, weight in weights.items():
            if not (weight > 0 and math.isfinite(weight)):
                raise ValueError(f"weight of tenant {tenant!r} must be > 0, got {weight}")
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.weights_key)
            if weights:
                pipe.hset(self.weights_key, mapping={t: repr(w) for t, w in weights.items()})
            pipe.execute()
