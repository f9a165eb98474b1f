"""Reading a region's load from its Redis: live and busy GPUs from heartbeats, queue depth."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import redis

from animfleet.region.keys import (
    BACKLOG_ALL,
    BUSY_SET,
    HOLDING_SET,
    QUEUED_SET,
    WAITING_SET,
    WORKER_SET,
)
from animfleet.region.load import RegionLoad
from animfleet.topology import Region


@dataclass(frozen=True)
class RegionStatus:
    """What the router reads from one region's Redis in one round trip.

    ``holding``: jobs this region holds (queued or running), per home region.
    ``waiting``: jobs of this home region that dispatchers hold back because every region they
    may use is full.
    ``backlog``: jobs accepted into the region's backlog, not yet on its GPU queue.
    ``oldest_queued_age_s`` covers both the GPU queue and the backlog.
    """

    load: RegionLoad
    oldest_queued_age_s: float
    holding: dict[str, int] = field(default_factory=dict)
    waiting: int = 0
    backlog: int = 0

    @property
    def scaling_signal(self) -> float:
        """Work per live GPU, ``(backlog + in_flight) / max(live_workers, 1)``: what the
        autoscaler tracks; above 0 with no live worker, it wakes the region."""
        return (self.backlog + self.load.in_flight) / max(self.load.live_workers, 1)


def read_region_status(
    client: redis.Redis, region: Region, homes: Sequence[str] = ()
) -> RegionStatus:
    """One round trip: workers, queue, oldest wait, and jobs held for each of ``homes``."""
    now = time.time()
    with client.pipeline(transaction=False) as pipe:
        pipe.zcount(WORKER_SET + region.name, now, "+inf")
        pipe.zcount(BUSY_SET + region.name, now, "+inf")
        # With the broker apart, the store's queued set counts the same jobs (those on the GPU
        # queue, and on their way to it) without asking the broker.
        if region.store_is_broker:
            pipe.llen(region.queue)
        else:
            pipe.zcard(QUEUED_SET + region.name)
        pipe.zrange(QUEUED_SET + region.name, 0, 0, withscores=True)
        pipe.zcount(WAITING_SET + region.name, now, "+inf")
        pipe.zcard(BACKLOG_ALL + region.name)
        pipe.zrange(BACKLOG_ALL + region.name, 0, 0, withscores=True)
        for home in homes:
            pipe.zcard(HOLDING_SET + home)
        live, busy, queued, oldest, waiting, backlog, oldest_waiting, *holding = pipe.execute()
    load = RegionLoad(
        region=region.name,
        live_workers=int(live),
        busy_workers=min(int(busy), int(live)),
        queue_depth=int(queued),
    )
    entered = [float(entry[0][1]) for entry in (oldest, oldest_waiting) if entry]
    age = max(0.0, now - min(entered)) if entered else 0.0
    return RegionStatus(
        load=load,
        oldest_queued_age_s=age,
        holding={home: int(count) for home, count in zip(homes, holding, strict=True) if count},
        waiting=int(waiting),
        backlog=int(backlog),
    )


def combine_status(name: str, parts: Iterable[RegionStatus]) -> RegionStatus:
    """A split region's status as one: its cells' counts summed, the oldest wait of any."""
    parts = list(parts)
    holding: dict[str, int] = {}
    for part in parts:
        for home, count in part.holding.items():
            holding[home] = holding.get(home, 0) + count
    return RegionStatus(
        load=RegionLoad(
            region=name,
            live_workers=sum(part.load.live_workers for part in parts),
            busy_workers=sum(part.load.busy_workers for part in parts),
            queue_depth=sum(part.load.queue_depth for part in parts),
        ),
        oldest_queued_age_s=max((part.oldest_queued_age_s for part in parts), default=0.0),
        holding=holding,
        waiting=sum(part.waiting for part in parts),
        backlog=sum(part.backlog for part in parts),
    )
