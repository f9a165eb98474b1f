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
    """``addons:<region>``: add-on name -> when a worker last advertised it; and
    ``addons:<region>:image``, the same for the add-ons that take a control image."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.key = ADDONS_SERVED + region
        self.image_key = self.key + ":image"

    def advertise(
        self, names: Iterable[str], now: float | None = None, with_image: Iterable[str] = ()
    ) -> None:
        """Record that a worker of the region serves ``names``, of which ``with_image`` take
        a control image."""
        stamp = time.time() if now is None else now
        scores = {name: stamp for name in names}
        if scores:
            self.redis.zadd(self.key, scores)
        imaged = {name: stamp for name in with_image}
        if imaged:
            self.redis.zadd(self.image_key, imaged)

    def served(self, now: float | None = None) -> frozenset[str]:
        """Names some worker advertised within :data:`SERVED_FOR_S`."""
        return self._names(self.key, now)

    def with_image(self, now: float | None = None) -> frozenset[str]:
        """Served names that take a control image (advertised as such within the same time)."""
        return self._names(self.image_key, now)

    def _names(self, key: str, now: float | None) -> frozenset[str]:
        since = (time.time() if now is None else now) - SERVED_FOR_S
        names = self.redis.zrangebyscore(key, since, "+inf")
        return frozenset(n.decode() if isinstance(n, bytes) else str(n) for n in names)
