"""A region's durable backlog: jobs accepted while no GPU can take them, waiting fairly.

Jobs enter the backlog only through the admission script (:mod:`animfleet.region.admission`),
which stores the record, its input and its Celery message and adds the job to its tenant's
queue here in one atomic call when no GPU can take it now; they leave it only through
:mod:`animfleet.region.handoff`.

Per tenant, a sorted set orders jobs by priority (higher first) then submission time. Tenants
with jobs form a ring served by deficit round robin with per-tenant weights. The job record
stays the truth: a canceled or expired job left in these sets is skipped when it is popped.
"""

from __future__ import annotations

import math
import time

import redis

from animfleet.jobs import MAX_PRIORITY
from animfleet.region.keys import (
    BACKLOG_ACTIVE,
    BACKLOG_ALL,
    BACKLOG_BYPASS,
    BACKLOG_MESSAGE,
    BACKLOG_RING,
    BACKLOG_TENANT,
    BACKLOG_WEIGHTS,
)

# Orders a tenant's jobs by priority, then created_at (unix seconds stay below this).
PRIORITY_STRIDE = 1e10
DEFAULT_WEIGHT = 1.0


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

    def tenant_key(self, tenant: str) -> str:
        return f"{BACKLOG_TENANT}{self.region}:{tenant}"

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
