"""One region's load as the router and the dispatcher see it."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RegionLoad:
    """A snapshot of one region's GPU fleet.

    Each GPU worker holds at most one job, so a region's capacity is its number of live workers
    and its load is what it holds: jobs running plus jobs waiting in its queue. (A batch worker,
    ``--batch N``, heartbeats one member per slot, so it counts as N workers here.)

    Args:
        region: the region name, as in the topology.
        live_workers: GPU workers whose heartbeat has not expired.
        busy_workers: live workers running a job right now.
        queue_depth: jobs waiting in the region's ``animate.<region>`` queue.
        demand: new work whose *home* is this region, in GPU equivalents: jobs submitted per
            second by this region's users times the mean GPU seconds per job (Little's law: the
            number of GPUs that traffic keeps busy). The router needs it to know how much
            traffic exceeds the home capacity, which in-flight counts cannot show once the
            admission limit caps them. ``None`` means unknown: the router then uses
            ``in_flight`` as the estimate.

    Example:
        >>> load = RegionLoad("eu-west", live_workers=10, busy_workers=8, queue_depth=1)
        >>> load.in_flight, load.headroom, round(load.utilization, 2)
        (9, 1, 0.9)
    """

    region: str
    live_workers: int
    busy_workers: int
    queue_depth: int
    demand: float | None = None

    def __post_init__(self) -> None:
        for name in ("live_workers", "busy_workers", "queue_depth"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"`{name}` of region {self.region!r} must be >= 0, got {value}")
        if self.demand is not None and not (self.demand >= 0 and math.isfinite(self.demand)):
            raise ValueError(
                f"`demand` of region {self.region!r} must be finite and >= 0, got {self.demand}"
            )

    @property
    def in_flight(self) -> int:
        """Jobs the region holds: running plus queued."""
        return self.busy_workers + self.queue_depth

    @property
    def capacity(self) -> int:
        """Jobs the region can hold at one per GPU: its live workers."""
        return self.live_workers

    @property
    def utilization(self) -> float:
        """``in_flight / capacity``; infinite when the region holds work but has no live GPU."""
        if self.capacity == 0:
            return 0.0 if self.in_flight == 0 else math.inf
        return self.in_flight / self.capacity

    @property
    def headroom(self) -> int:
        """Free GPUs: capacity not taken by running or queued jobs (never negative)."""
        return max(0, self.capacity - self.in_flight)

    @property
    def offered(self) -> float:
        """The home demand in GPU equivalents, estimated from ``in_flight`` when not reported."""
        return float(self.in_flight) if self.demand is None else self.demand
