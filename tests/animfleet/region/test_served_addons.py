"""The region's served add-ons, on a real Redis."""

from __future__ import annotations

import redis

from animfleet.region.served_addons import SERVED_FOR_S, RegionAddons


def test_workers_advertise_and_old_advertisements_lapse(redis_client: redis.Redis) -> None:
    addons = RegionAddons(redis_client, "east")
    assert addons.served() == frozenset()
    addons.advertise(["shake", "pulse"], now=1000.0)
    addons.advertise(["orbit"], now=1000.0 + SERVED_FOR_S)
    assert addons.served(now=1000.0 + 10) == {"shake", "pulse", "orbit"}
    assert addons.served(now=2000.0 + SERVED_FOR_S) == {"orbit"}
    assert RegionAddons(redis_client, "west").served() == frozenset()
