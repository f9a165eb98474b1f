"""The routing policies and retry modes the simulator compares.

Every policy only writes routing tables; admission (:func:`dispatcher.admission.choose_region`)
and retries (:class:`dispatcher.admission.RetrySchedule`) are the production code in all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from animfleet.topology import Topology
from dispatcher.admission import AdmissionSettings, RetrySchedule
from dispatcher.routing import RegionLoad, RoutingSettings, RoutingTable, compute_routing_table

Loads = Mapping[str, RegionLoad]
TableWriter = Callable[[Topology, Loads, RoutingTable | None, float], RoutingTable]


@dataclass(frozen=True)
class RoutingPolicy:
    """A named way to write the routing table every router period from the regions' loads:
    ``write(topology, loads, previous_table, now)``."""

    name: str
    write: TableWriter

    def table(
        self, topology: Topology, loads: Loads, previous: RoutingTable | None, now: float
    ) -> RoutingTable:
        return self.write(topology, loads, previous, now)


def home_only(topology: Topology, loads: Loads, _: RoutingTable | None, now: float) -> RoutingTable:
    """Every job runs in its home region or not at all."""
    return RoutingTable.home_only(topology.names, computed_at=now)


def least_loaded(
    topology: Topology, loads: Loads, _: RoutingTable | None, now: float
) -> RoutingTable:
    """Global least-loaded: every source sends to all regions in proportion to their free
    GPUs at the last refresh, whatever the distance."""
    free = {r: float(loads[r].headroom) for r in topology.names if r in loads}
    if sum(free.values()) <= 0:
        free = {r: float(load.capacity) for r, load in loads.items()}
    total = sum(free.values())
    shares = {r: f / total for r, f in free.items() if f > 0} if total > 0 else {}
    return RoutingTable({source: shares for source in topology.names}, computed_at=now)


def static_spill(
    topology: Topology, loads: Loads, _: RoutingTable | None, now: float
) -> RoutingTable:
    """Home first; when home is full, the three nearest regions in order (a waterfall fixed at
    deploy time, blind to their load)."""
    fallback = {r: topology.by_distance(r)[1:4] for r in topology.names}
    shares = {r: {r: 1.0} for r in topology.names}
    return RoutingTable(shares, fallback=fallback, computed_at=now)


def _in_name_order(table: RoutingTable, fallback: bool = True) -> RoutingTable:
    """``table`` with each source's targets in name order, and without its fallback lists
    unless ``fallback``. The router builds some shares by iterating a set of region names, so
    their order, and with it which target a given random draw picks, would otherwise change
    with Python's per-process string hashing and a seeded run would not repeat."""
    shares = {source: dict(sorted(targets.items())) for source, targets in table.shares.items()}
    return RoutingTable(
        shares, fallback=table.fallback if fallback else {}, computed_at=table.computed_at
    )


def ring_router(settings: RoutingSettings | None = None) -> RoutingPolicy:
    """The production router, :func:`dispatcher.routing.compute_routing_table`."""

    def write(
        topology: Topology, loads: Loads, previous: RoutingTable | None, now: float
    ) -> RoutingTable:
        return _in_name_order(compute_routing_table(topology, loads, previous, settings, now=now))

    return RoutingPolicy("ring-router", write)


def seeds_router(settings: RoutingSettings | None = None) -> RoutingPolicy:
    """The seeds' router: the ring router's shares without the ``fallback`` list.

    A job may only go where the table gives a positive share, so from the start of a spike
    until the next table moves a share abroad (up to one router period, later if the smoothed
    demand has not yet passed capacity) the spiking region's jobs are confined to its own full
    GPUs, as the seeds' tables confined each request to the hosts they allowed.
    """

    def write(
        topology: Topology, loads: Loads, previous: RoutingTable | None, now: float
    ) -> RoutingTable:
        table = compute_routing_table(topology, loads, previous, settings, now=now)
        return _in_name_order(table, fallback=False)

    return RoutingPolicy("seeds-router", write)


POLICIES: dict[str, RoutingPolicy] = {
    policy.name: policy
    for policy in (
        RoutingPolicy("home-only", home_only),
        RoutingPolicy("least-loaded", least_loaded),
        RoutingPolicy("static-spill", static_spill),
        seeds_router(),
        ring_router(),
    )
}


@dataclass(frozen=True)
class RetryMode:
    """What a dispatcher does when no region can take a job.

    ``naive``: retry after one probe round trip, at most ``attempts`` times (first included),
    no delay; the scenarios give it the production ``max_attempts``.
    ``backoff``: the production :meth:`RetrySchedule.backoff` plus the execution delay.
    """

    name: str
    schedule: RetrySchedule
    execution_delay: bool

    @classmethod
    def naive(cls, probe_s: float = 0.05, attempts: int = 12) -> RetryMode:
        return cls("naive", RetrySchedule.immediate(probe_s, attempts), execution_delay=False)

    @classmethod
    def backoff(cls, settings: AdmissionSettings) -> RetryMode:
        return cls("backoff", RetrySchedule.backoff(settings), execution_delay=True)
