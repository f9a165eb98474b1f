"""Whether a region serves the add-ons a job asks for: the dispatcher's check at submit.

Read from the region's Redis (what its workers advertised) and kept for ``ttl_s``, like the
deployments in :mod:`dispatcher.versions`: a new add-on is accepted within that of a worker
advertising it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import redis

from animfleet.addons import AddonUse
from animfleet.region.addons import RegionAddons
from dispatcher.inputs import InvalidInput


class AddonChecker:
    """Checks requested add-ons against a short-lived copy of each region's served set."""

    def __init__(self, redis_of: Callable[[str], redis.Redis], ttl_s: float = 1.0) -> None:
        self.redis_of, self.ttl_s = redis_of, ttl_s
        self._served: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def served(self, region: str) -> frozenset[str]:
        """The add-ons ``region``'s workers serve (cached for ``ttl_s``)."""
        with self._lock:
            held = self._served.get(region)
        if held is not None and time.monotonic() - held[0] < self.ttl_s:
            return held[1]
        names = RegionAddons(self.redis_of(region), region).served()
        with self._lock:
            self._served[region] = (time.monotonic(), names)
        return names

    def serves(self, region: str, addons: Sequence[AddonUse]) -> bool:
        """Whether ``region`` serves every add-on in ``addons`` (always, for none)."""
        return not addons or {a.name for a in addons} <= self.served(region)

    def check(self, region: str, addons: Sequence[AddonUse]) -> None:
        """Raises :class:`InvalidInput` (field ``addons``) for an add-on ``region`` lacks."""
        if not addons:
            return
        served = self.served(region)
        missing = sorted({a.name for a in addons} - served)
        if missing:
            known = ", ".join(sorted(served)) or "none"
            raise InvalidInput(
                "addons", f"the region serves no add-on {', '.join(missing)} (it serves: {known})"
            )
