"""Cells at admission and in the router: a sibling cell with room before any other region."""

from __future__ import annotations

import random

from animfleet.region.load import RegionLoad
from animfleet.topology import Topology
from dispatcher.admission import AdmissionSettings, choose_region
from dispatcher.routing import RoutingTable, compute_routing_table

SETTINGS = AdmissionSettings(allowance=0)


def topology() -> Topology:
    regions: dict[str, object] = {
        "us-east": {"cells": 3, "latency_ms": {"near": 10, "far": 90}},
        "near": {"broker_url": "redis://near/0", "latency_ms": {"far": 80}},
        "far": {"broker_url": "redis://far/0"},
    }
    for index in (1, 2, 3):
        regions[f"us-east-c{index}"] = {"broker_url": f"redis://c{index}/0"}
    return Topology.from_mapping({"regions": regions}, env={})


def test_a_full_cell_spills_to_the_sibling_with_most_room_before_a_nearer_region() -> None:
    fleet = topology()
    # the table sends the full cell's overflow to "near" (its fallback, 10 ms away)
    table = RoutingTable({"us-east-c1": {"us-east-c1": 1.0}}, fallback={"us-east-c1": ["near"]})
    live = {"us-east-c1": 4, "us-east-c2": 4, "us-east-c3": 4, "near": 4}
    held = {"us-east-c1": 4, "us-east-c2": 3, "us-east-c3": 1, "near": 0}
    siblings = fleet.siblings("us-east-c1")
    rng = random.Random(1)
    assert choose_region(table, "us-east-c1", held, live, rng, SETTINGS, siblings) == "us-east-c3"
    # without cells the same table spills to the other region
    assert choose_region(table, "us-east-c1", held, live, rng, SETTINGS) == "near"
    # siblings full too: then the other region
    held.update({"us-east-c2": 4, "us-east-c3": 4})
    assert choose_region(table, "us-east-c1", held, live, rng, SETTINGS, siblings) == "near"
    # room at home: home, whatever the siblings have
    held["us-east-c1"] = 0
    assert choose_region(table, "us-east-c1", held, live, rng, SETTINGS, siblings) == "us-east-c1"


def test_the_router_spills_a_cell_to_its_siblings_before_other_regions() -> None:
    fleet = topology()
    demand = {"us-east-c1": 12.0}
    loads = {name: RegionLoad(name, 10, 0, 0, demand=demand.get(name, 0.0)) for name in fleet.names}
    table = compute_routing_table(fleet, loads)
    shares = table.shares["us-east-c1"]
    assert set(shares) == {"us-east-c1", "us-east-c2", "us-east-c3"}
    assert shares["us-east-c2"] > 0 and shares["us-east-c3"] > 0
    assert table.fallback["us-east-c1"][:2] == ("us-east-c2", "us-east-c3")
    # the same overload on a region not split goes to its neighbours (the cells with room)
    loads["near"] = RegionLoad("near", 10, 0, 0, demand=12.0)
    spilled = set(compute_routing_table(fleet, loads).shares["near"]) - {"near"}
    assert spilled == {"us-east-c2", "us-east-c3"}
