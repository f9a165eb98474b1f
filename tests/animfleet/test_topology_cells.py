"""A region split into cells: each cell a unit of the topology, the region name mapping to them."""

from __future__ import annotations

import tomllib
from collections import Counter

import pytest

from animfleet.topology import Topology


def split(cells: int = 2, **extra: object) -> dict[str, object]:
    regions: dict[str, object] = {
        "us-east": {"cells": cells, "latency_ms": {"eu-west": 80}, "storage": {"bucket": "ue"}},
        "eu-west": {"broker_url": "redis://eu:6379/0"},
    }
    for index in range(1, cells + 1):
        regions[f"us-east-c{index}"] = {"broker_url": f"redis://ue{index}:6379/0"}
    regions.update(extra)
    return {"regions": regions}


def test_a_split_region_is_its_cells_each_with_its_own_broker_and_queue() -> None:
    topology = Topology.from_mapping(split(), env={})
    assert topology.names == ["us-east-c1", "us-east-c2", "eu-west"]
    assert topology.groups == ["us-east", "eu-west"]
    cell = topology.region("us-east-c2")
    assert (cell.broker_url, cell.queue, cell.group) == (
        "redis://ue2:6379/0",
        "animate.us-east-c2",
        "us-east",
    )
    assert cell.storage.bucket == "ue"  # the region's table, inherited
    assert topology.cells_of("us-east") == ["us-east-c1", "us-east-c2"]
    assert topology.cells_of("eu-west") == ["eu-west"]
    assert topology.cells_of("us-east-c1") == ["us-east-c1"]
    assert topology.siblings("us-east-c1") == ["us-east-c2"]
    assert topology.siblings("eu-west") == []
    with pytest.raises(KeyError, match="unknown region 'ap-south'"):
        topology.cells_of("ap-south")


def test_sibling_cells_are_nearer_than_any_region() -> None:
    data = split(3)
    data["regions"]["us-east"]["latency_ms"] = {}  # type: ignore[index]
    data["regions"]["eu-west"] = {"broker_url": "redis://eu:6379/0", "latency_ms": {"us-east": 0}}  # type: ignore[index]
    topology = Topology.from_mapping(data, env={})
    assert topology.latency("us-east-c1", "us-east-c3") == 0.0
    assert topology.latency("us-east-c2", "eu-west") == 0.0
    # itself first, then its siblings, then a region at the same latency
    assert topology.by_distance("us-east-c2") == [
        "us-east-c2",
        "us-east-c1",
        "us-east-c3",
        "eu-west",
    ]
    assert Topology.from_mapping(split(), env={}).latency("eu-west", "us-east-c1") == 80.0


def test_each_cell_needs_its_own_store() -> None:
    data = split()
    data["regions"]["us-east-c2"] = {"broker_url": "redis://ue1:6379/0"}  # type: ignore[index]
    with pytest.raises(ValueError, match="share the store"):
        Topology.from_mapping(data, env={})


def test_a_cell_is_overridden_by_its_own_environment_variables() -> None:
    env = {"ANIMFLEET_REGION_US_EAST_C2_STORE_URL": "redis://other:6379/0"}
    topology = Topology.from_mapping(split(), env=env)
    assert topology.region("us-east-c2").store == "redis://other:6379/0"
    assert topology.region("us-east-c1").store == "redis://ue1:6379/0"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"us-east-c3": {"broker_url": "redis://x:6379/0"}}, "has no cell 'us-east-c3'"),
        ({"us-east": {"cells": 0}}, "whole number"),
    ],
)
def test_bad_cells_name_the_problem(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Topology.from_mapping(split(2, **extra), env={})


def test_a_tenant_keeps_its_cell_and_tenants_spread_over_the_cells() -> None:
    topology = Topology.from_mapping(split(4), env={})
    tenants = [f"tenant-{index}" for index in range(400)]
    cells = {tenant: topology.cell_for("us-east", tenant) for tenant in tenants}
    assert all(topology.cell_for("us-east", t) == cell for t, cell in cells.items())
    spread = Counter(cells.values())
    assert set(spread) == set(topology.cells_of("us-east"))
    assert min(spread.values()) > 60  # 100 each on average
    assert topology.cell_for("eu-west", "tenant-1") == "eu-west"
    assert topology.cell_for("us-east-c3", "tenant-1") == "us-east-c3"
    # one cell more moves only the tenants the new cell wins
    grown = Topology.from_mapping(split(5), env={})
    moved = [t for t in tenants if grown.cell_for("us-east", t) != cells[t]]
    assert moved and all(grown.cell_for("us-east", t) == "us-east-c5" for t in moved)


def test_a_cell_added_takes_its_tenants_at_its_time_and_names_their_earlier_cell() -> None:
    day = 24 * 3600.0
    added = 1_800_000_000.0  # the fleet file's time for the fifth cell
    grown = Topology.from_mapping(
        split(5, **{"us-east-c5": {"broker_url": "redis://ue5:6379/0", "added_at": added}}), env={}
    )
    before = Topology.from_mapping(split(4), env={})
    tenants = [f"tenant-{index}" for index in range(400)]
    moved = [t for t in tenants if grown.cell_for("us-east", t, added) == "us-east-c5"]
    assert moved
    for tenant in tenants:
        old = before.cell_for("us-east", tenant)
        # Before its time the new cell is no one's home, and no earlier cell is asked.
        assert grown.cell_for("us-east", tenant, added - 1) == old
        assert grown.earlier_cells_for("us-east", tenant, added - 1) == []
        # From then on, for 7 days, a moved tenant's keys are still looked for where they were.
        expected = [old] if tenant in moved else []
        assert grown.earlier_cells_for("us-east", tenant, added + 1) == expected
        assert grown.earlier_cells_for("us-east", tenant, added + 6.9 * day) == expected
        assert grown.earlier_cells_for("us-east", tenant, added + 7.1 * day) == []
    assert grown.earlier_cells_for("us-east-c1", moved[0], added + 1) == []  # a cell named


def test_the_terraform_modules_fleet_file_loads_as_cells() -> None:
    fleet = """
    [regions.us-east]
    broker_url = "amqps://b-1234.mq.us-east-1.amazonaws.com:5671"
    store_url = "rediss+cluster://clustercfg.animfleet-us-east-c1.memorydb:6379"
    latency_ms = { eu-west = 80 }
    [regions.us-east.storage]
    bucket = "animfleet-us-east"
    [regions.us-east.cells.c1]
    store_url = "rediss+cluster://clustercfg.animfleet-us-east-c1.memorydb:6379"
    [regions.us-east.cells.c2]
    store_url = "rediss+cluster://clustercfg.animfleet-us-east-c2.memorydb:6379"
    [regions.eu-west]
    broker_url = "rediss://master.eu-west.cache.amazonaws.com:6379/0"
    """
    env = {"ANIMFLEET_REGION_US_EAST_C2_STORE_URL": "rediss+cluster://app:pw@c2.memorydb:6379"}
    topology = Topology.from_mapping(tomllib.loads(fleet), env=env)
    assert topology.cells_of("us-east") == ["us-east-c1", "us-east-c2"]
    c1, c2 = topology.region("us-east-c1"), topology.region("us-east-c2")
    assert c1.broker_url == c2.broker_url  # one broker; each cell its own queue on it
    assert (c1.queue, c2.queue) == ("animate.us-east-c1", "animate.us-east-c2")
    assert c1.store.startswith("rediss+cluster://clustercfg.animfleet-us-east-c1.")
    assert c2.store == "rediss+cluster://app:pw@c2.memorydb:6379"  # the instance's secret
    assert c2.storage.bucket == "animfleet-us-east" and c2.latency_ms == {"eu-west": 80}
    with pytest.raises(ValueError, match="cells are named c1, c2"):
        Topology.from_mapping({"regions": {"r": {"cells": {"blue": {}}}}}, env={})
