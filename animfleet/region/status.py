"""Reading a region's load from its Redis: live and busy GPUs from heartbeats, queue depth."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from animfleet.region.keys import BUSY_SET, HOLDING_SET, QUEUED_SET, WAITING_SET, WORKER_SET
from animfleet.region.load import RegionLoad
from animfleet.topology import Region


@dataclass(frozen=True)
class RegionStatus:
    """What the router reads from one region's Redis in one round trip.

    ``holding``: jobs this region holds (queued or running), per home region.
    ``waiting``: jobs of this home region that dispatchers hold back because every region they
    may use is full.
    """

    load: RegionLoad
    oldest_queued_age_s: float
    holding: dict[str, int] = field(default_factory=dict)
    waiting: int = 0


def read_region_status(
    client: redis.Redis, region: Region, homes: Sequence[str] = ()
) -> RegionStatus:
    """One round trip: workers, queue, oldest wait, and jobs held for each of ``homes``."""
    now = time.time()
    with client.pipeline(transaction=False) as pipe:
        pipe.zcount(WORKER_SET + region.name, now, "+inf")
        pipe.zcount(BUSY_SET + region.name, now, "+inf")
        pipe.llen(region.queue)
        pipe.zrange(QUEUED_SET + region.name, 0, 0, withscores=True)
        pipe.zcount(WAITING_SET + region.name, now, "+inf")
        for home in homes:
            pipe.zcard(HOLDING_SET + home)
        live, busy, queued, oldest, waiting, *holding = pipe.execute()
    load = RegionLoad(
        region=region.name,
        live_workers=int(live),
        busy_workers=min(int(busy), int(live)),
        queue_depth=int(queued),
    )
    age = max(0.0, now - float(oldest[0][1])) if oldest else 0.0
    return RegionStatus(
        load=load,
        oldest_queued_age_s=age,
        holding={home: int(count) for home, count in zip(homes, holding, strict=True) if count},
        waiting=int(waiting),
    )
