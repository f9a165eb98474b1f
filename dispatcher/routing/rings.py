"""The routing-ring algorithm that turns region loads into a routing table.

Traffic stays home while the home region has headroom. When a region's demand passes
``home_target`` of its live GPUs, the router repeatedly takes the region furthest over (or
closest to) capacity and moves a slice of its excess to the regions of the innermost *ring*
(regions within a latency bound) that still have room below ``spill_target``. Outer rings unlock
only as the overload grows, so a slight overload stays close and a severe one may travel. The
new table moves at most ``max_share_change`` from the previous one per refresh, so it does not
flap; regions without a live worker get nothing, at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from animfleet.region.load import RegionLoad
from animfleet.topology import Topology
from dispatcher.routing.table import RoutingTable

EPSILON = 1e-9


@dataclass(frozen=True)
class Ring:
    """Regions within ``max_latency_ms`` of the source, usable once the source's pressure
    (home demand / live GPUs) reaches ``min_pressure``."""

    max_latency_ms: float
    min_pressure: float


def _default_rings() -> tuple[Ring, ...]:
    return (Ring(60.0, 0.0), Ring(150.0, 1.1), Ring(300.0, 1.3), Ring(math.inf, 1.6))


@dataclass(frozen=True)
class RoutingSettings:
    """Thresholds of the ring router.

    Args:
        home_target: a region keeps all of its own traffic while its demand stays below this
            fraction of its live GPUs; only the demand above it is offloaded. At 1 the table
            moves just the true excess; moments when home is full anyway overflow to the
            fallback ring at admission.
        spill_target: a region takes other regions' traffic only up to this fraction of its
            live GPUs (its own demand counts first), leaving it room for its own bursts.
        rings: latency bounds, innermost first, each unlocked at a pressure. The defaults: within
            60 ms on any overload, 150 ms from 1.1x, 300 ms from 1.3x, anywhere from 1.6x.
        step: the slice of an overloaded region's capacity moved per iteration; smaller slices
            share scarce headroom more evenly between overloaded regions.
        max_share_change: the most any share may move between two consecutive tables.
        min_share: targets below this share are folded back into the home region (or the
            largest target), so the table does not spray tiny shares.
    """

    home_target: float = 1.0
    spill_target: float = 0.85
    rings: tuple[Ring, ...] = field(default_factory=_default_rings)
    step: float = 0.05
    max_share_change: float = 0.1
    min_share: float = 0.01

    def __post_init__(self) -> None:
        for name in ("home_target", "spill_target", "step", "max_share_change"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"`{name}` must be in (0, 1], got {value}")
        if not 0 <= self.min_share < 0.5:
            raise ValueError(f"`min_share` must be in [0, 0.5), got {self.min_share}")
        if not self.rings:
            raise ValueError("`rings` needs at least one ring")
        bounds = [ring.max_latency_ms for ring in self.rings]
        if bounds != sorted(bounds):
            raise ValueError(f"`rings` must be ordered by latency bound, got {bounds}")


def compute_routing_table(
    topology: Topology,
    loads: Mapping[str, RegionLoad],
    previous: RoutingTable | None = None,
    settings: RoutingSettings | None = None,
    now: float = 0.0,
) -> RoutingTable:
    """Compute the routing table for the current loads.

    Args:
        topology: the regions and the latency between them.
        loads: the latest load of each region; a region without an entry counts as down.
        previous: the table in force, used to damp changes (``None`` on the first run).
        settings: thresholds and rings; the defaults of :class:`RoutingSettings` otherwise.
        now: stored as the table's ``computed_at``.

    Returns:
        A table with one entry per region of the topology. Shares sum to 1 for every source
        that has at least one live region; a source with none gets an empty entry. Each
        source's fallback lists the live regions of the innermost ring, nearest first, for
        the moments when every weighted target is full.
    """
    settings = settings or RoutingSettings()
    target = _place_demand(topology, loads, settings)
    live = {name for name in topology.names if name in loads and loads[name].live_workers > 0}
    shares = {}
    for source in topology.names:
        wanted = target[source]
        before = _without_dead(previous.shares.get(source, {}) if previous else {}, live)
        shares[source] = _damp(before, wanted, settings.max_share_change) if before else wanted
    inner = settings.rings[0].max_latency_ms
    fallback = {
        source: [
            r
            for r in topology.by_distance(source)[1:]
            if r in live and topology.latency(source, r) <= inner
        ]
        for source in topology.names
    }
    return RoutingTable(shares, fallback=fallback, computed_at=now)


def _place_demand(
    topology: Topology, loads: Mapping[str, RegionLoad], settings: RoutingSettings
) -> dict[str, dict[str, float]]:
    """The undamped shares: home first, then ring by ring for the most pressed region."""
    names = topology.names
    live = {r: loads[r].live_workers if r in loads else 0 for r in names}
    demand = {r: loads[r].offered if r in loads else 0.0 for r in names}
    nearest = {r: topology.by_distance(r) for r in names}
    flow: dict[str, dict[str, float]] = {r: {} for r in names}
    excess: dict[str, float] = {}
    spare: dict[str, float] = {}
    for region in names:
        kept = min(demand[region], live[region] * settings.home_target)
        if kept > 0:
            flow[region][region] = kept
        excess[region] = demand[region] - kept
        spare[region] = max(0.0, live[region] * settings.spill_target - kept)

    def pressure(region: str) -> float:
        return demand[region] / live[region] if live[region] else math.inf

    stuck: set[str] = set()
    while True:
        pressed = [r for r in names if excess[r] > EPSILON and r not in stuck]
        if not pressed:
            break
        source = max(pressed, key=lambda r: (pressure(r), excess[r], r))
        ring = _open_ring(
            topology, source, nearest[source], pressure(source), spare, live, settings
        )
        if not ring:
            stuck.add(source)
            continue
        room = sum(spare[t] for t in ring)
        amount = min(excess[source], settings.step * max(live[source], demand[source]), room)
        for target_region in ring:
            moved = amount * spare[target_region] / room
            flow[source][target_region] = flow[source].get(target_region, 0.0) + moved
            spare[target_region] -= moved
        excess[source] -= amount

    shares: dict[str, dict[str, float]] = {}
    for source in names:
        leftover = excess[source]
        if leftover > EPSILON:
            # Nowhere with room: live homes keep the rest (admission sheds it); dead homes send
            # it to the nearest live region rather than nowhere.
            overflow = (
                source if live[source] else next((r for r in nearest[source] if live[r]), None)
            )
            if overflow is not None:
                flow[source][overflow] = flow[source].get(overflow, 0.0) + leftover
        shares[source] = _normalize(flow[source], source, nearest[source], live, settings.min_share)
    return shares


def _open_ring(
    topology: Topology,
    source: str,
    by_distance: list[str],
    pressure: float,
    spare: Mapping[str, float],
    live: Mapping[str, int],
    settings: RoutingSettings,
) -> list[str]:
    """Regions of the innermost unlocked ring that still have room, nearest first; before any
    ring, the sibling cells of a cell with room (a spill that stays in the region)."""
    group = topology.region(source).group
    siblings = [
        r
        for r in by_distance
        if r != source and live[r] > 0 and spare[r] > EPSILON and topology.region(r).group == group
    ]
    if siblings:
        return siblings
    for ring in settings.rings:
        if pressure < ring.min_pressure:
            return []
        members = [
            r
            for r in by_distance
            if r != source
            and live[r] > 0
            and spare[r] > EPSILON
            and topology.latency(source, r) <= ring.max_latency_ms
        ]
        if members:
            return members
    return []


def _normalize(
    flow: Mapping[str, float],
    source: str,
    by_distance: list[str],
    live: Mapping[str, int],
    min_share: float,
) -> dict[str, float]:
    """Flows to shares summing to 1, tiny shares folded into home (or the largest target)."""
    total = sum(flow.values())
    if total <= EPSILON:
        home = source if live[source] else next((r for r in by_distance if live[r]), None)
        return {} if home is None else {home: 1.0}
    shares = {t: f / total for t, f in flow.items() if f > 0}
    anchor = source if source in shares else max(shares, key=lambda t: (shares[t], t))
    for region in [t for t, s in shares.items() if s < min_share and t != anchor]:
        shares[anchor] += shares.pop(region)
    return shares


def _without_dead(shares: Mapping[str, float], live: set[str]) -> dict[str, float]:
    """Previous shares with dead regions removed and the rest rescaled to sum to 1."""
    alive = {t: s for t, s in shares.items() if t in live and s > 0}
    total = sum(alive.values())
    return {t: s / total for t, s in alive.items()} if total > 0 else {}


def _damp(
    before: Mapping[str, float], wanted: Mapping[str, float], limit: float
) -> dict[str, float]:
    """Move from ``before`` towards ``wanted`` by at most ``limit`` on any share.

    Both are distributions, so any point on the segment between them is one too: scaling the
    whole step keeps the sum at 1 and every share non-negative.
    """
    targets = sorted(set(before) | set(wanted))  # a fixed order: same draw, same region
    if not wanted:
        return {}
    largest = max(abs(wanted.get(t, 0.0) - before.get(t, 0.0)) for t in targets)
    fraction = 1.0 if largest <= limit else limit / largest
    mixed = {
        t: before.get(t, 0.0) + fraction * (wanted.get(t, 0.0) - before.get(t, 0.0))
        for t in targets
    }
    total = sum(mixed.values())
    return {t: s / total for t, s in mixed.items() if s > EPSILON}
