"""The ring router: home first, nearest ring first, dead regions get nothing, damped changes."""

from __future__ import annotations

import math

import pytest

from animfleet.topology import Topology
from dispatcher.routing import (
    RegionLoad,
    Ring,
    RoutingSettings,
    RoutingTable,
    compute_routing_table,
)

# home -- 20 ms -- near-a, near-b; 120 ms -- mid; 250 ms -- far
LATENCY = {
    "home": {"near-a": 20, "near-b": 25, "mid": 120, "far": 250},
    "near-a": {"near-b": 30, "mid": 110, "far": 240},
    "near-b": {"mid": 115, "far": 245},
    "mid": {"far": 150},
}


@pytest.fixture
def topology() -> Topology:
    regions = {
        name: {"broker_url": f"redis://x/{name}", "latency_ms": LATENCY.get(name, {})}
        for name in ("home", "near-a", "near-b", "mid", "far")
    }
    return Topology.from_mapping({"regions": regions}, env={})


def loads(
    demand: dict[str, float], live: int = 10, dead: tuple[str, ...] = ()
) -> dict[str, RegionLoad]:
    return {
        name: RegionLoad(name, 0 if name in dead else live, 0, 0, demand=demand.get(name, 0.0))
        for name in ("home", "near-a", "near-b", "mid", "far")
    }


def assert_sums_to_one(table: RoutingTable) -> None:
    for source, shares in table.shares.items():
        if shares:
            assert math.isclose(sum(shares.values()), 1.0, abs_tol=1e-9), source
            assert all(share >= 0 for share in shares.values())


def test_home_keeps_all_traffic_while_it_has_headroom(topology: Topology) -> None:
    table = compute_routing_table(topology, loads({"home": 9.0, "near-a": 5.0}))
    assert table.shares["home"] == {"home": 1.0}
    assert table.shares["near-a"] == {"near-a": 1.0}
    assert_sums_to_one(table)


def test_slight_overload_goes_to_the_nearest_ring_only(topology: Topology) -> None:
    table = compute_routing_table(topology, loads({"home": 10.5}))
    assert table.share("home", "near-a") > 0 and table.share("home", "near-b") > 0
    assert table.share("home", "mid") == 0 and table.share("home", "far") == 0
    assert table.share("home", "home") == pytest.approx(10.0 / 10.5)
    assert_sums_to_one(table)


def test_farther_rings_open_only_when_the_near_one_is_full(topology: Topology) -> None:
    # near regions already at their spill target: the excess has to travel to `mid`
    busy_near = {"home": 14.0, "near-a": 8.5, "near-b": 8.5}
    table = compute_routing_table(topology, loads(busy_near))
    assert table.share("home", "near-a") == 0 and table.share("home", "near-b") == 0
    assert table.share("home", "mid") > 0
    # with room near, the same overload stays near
    table = compute_routing_table(topology, loads({"home": 14.0}))
    assert table.share("home", "mid") == 0 and table.share("home", "far") == 0


def test_rings_unlock_with_pressure(topology: Topology) -> None:
    settings = RoutingSettings(rings=(Ring(60, 0.0), Ring(200, 1.3), Ring(math.inf, 2.0)))
    near_full = {"near-a": 8.5, "near-b": 8.5}
    mild = compute_routing_table(topology, loads({"home": 12.0, **near_full}), settings=settings)
    assert mild.shares["home"] == {"home": 1.0}  # 1.2x: only the (full) inner ring is open
    severe = compute_routing_table(topology, loads({"home": 14.0, **near_full}), settings=settings)
    assert severe.share("home", "mid") > 0 and severe.share("home", "far") == 0


def test_regions_without_live_workers_take_nothing(topology: Topology) -> None:
    table = compute_routing_table(topology, loads({"home": 15.0}, dead=("near-a",)))
    for shares in table.shares.values():
        assert "near-a" not in shares
    assert table.share("home", "near-b") > 0
    assert "near-a" not in table.fallback["home"]


def test_dead_home_sends_everything_away_at_once(topology: Topology) -> None:
    before = compute_routing_table(topology, loads({"home": 5.0}))
    after = compute_routing_table(topology, loads({"home": 5.0}, dead=("home",)), before)
    assert after.share("home", "home") == 0
    assert_sums_to_one(after)


def test_no_live_region_means_no_shares(topology: Topology) -> None:
    dead = ("home", "near-a", "near-b", "mid", "far")
    table = compute_routing_table(topology, loads({"home": 5.0}, dead=dead))
    assert all(not shares for shares in table.shares.values())


def test_damping_bounds_every_change(topology: Topology) -> None:
    settings = RoutingSettings(max_share_change=0.1)
    previous = compute_routing_table(topology, loads({"home": 5.0}), settings=settings)
    undamped = compute_routing_table(topology, loads({"home": 20.0}), settings=settings)
    assert undamped.share("home", "home") < 0.8
    table = previous
    for _ in range(30):
        new = compute_routing_table(topology, loads({"home": 20.0}), table, settings)
        for target in set(new.shares["home"]) | set(table.shares["home"]):
            assert abs(new.share("home", target) - table.share("home", target)) <= 0.1 + 1e-9
        assert_sums_to_one(new)
        table = new
    assert table.share("home", "home") == pytest.approx(undamped.share("home", "home"), abs=1e-6)


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="home_target"):
        RoutingSettings(home_target=0)
    with pytest.raises(ValueError, match="ordered"):
        RoutingSettings(rings=(Ring(100, 0), Ring(50, 1)))
