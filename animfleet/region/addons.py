"""The motion add-ons a region serves: each worker advertises its own at boot, dispatchers
read them to refuse a job asking for one no worker has."""

from __future__ import annotations

import time
from collections.abc import Iterable

import redis

from animfleet.region.keys import ADDONS_SERVED

# An add-on no worker has advertised for this long is no longer served (workers advertise at
# every boot; a fleet redeploys well within it).
SERVED_FOR_S = 7 * 24 * 3600


class RegionAddons:
    """``addons:<region>``: add-on name -> when a worker last advertised it."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.key = ADDONS_SERVED + region

    def advertise(self, names: Iterable[str], now: float | None = None) -> None:
        """Record that a worker of the region serves ``names``."""
        stamp = time.time() if now is None else now
        scores = {name: stamp for name in names}
        if scores:
            self.redis.zadd(self.key, scores)

    def served(self, now: float | None = None) -> frozenset[str]:
        """Names some worker advertised within :data:`SERVED_FOR_S`."""
        since = (time.time() if now is None else now) - SERVED_FOR_S
        names = self.redis.zrangebyscore(self.key, since, "+inf")
        return frozenset(n.decode() if isinstance(n, bytes) else str(n) for n in names)
