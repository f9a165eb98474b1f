"""``--region`` on a fleet with a region split into cells: the region names its cells."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from launcher.command_errors import CliError
from launcher.fleet_args import regions_of, topology_of, unit_in

FLEET = """
[regions.us-east]
cells = 2
[regions.us-east-c1]
broker_url = "redis://c1:6379/0"
[regions.us-east-c2]
broker_url = "redis://c2:6379/0"
[regions.eu-west]
broker_url = "redis://eu:6379/0"
latency_ms = { us-east = 80 }
"""


def test_a_split_region_names_its_cells(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET)
    args = argparse.Namespace(fleet=str(fleet))
    assert [r.name for r in regions_of(args, ["us-east"])] == ["us-east-c1", "us-east-c2"]
    assert [r.name for r in regions_of(args, ["us-east-c2", "eu-west"])] == [
        "us-east-c2",
        "eu-west",
    ]
    assert [r.name for r in regions_of(args, None)] == ["us-east-c1", "us-east-c2", "eu-west"]
    with pytest.raises(CliError, match="unknown region 'ap-south'"):
        regions_of(args, ["ap-south"])


def test_a_one_unit_process_of_a_split_region_serves_its_cell(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET)
    topology = topology_of(argparse.Namespace(fleet=str(fleet)))
    assert unit_in(topology, "us-east", "us-east-c2").name == "us-east-c2"  # the host's cell
    assert unit_in(topology, "us-east", "").name == "us-east-c1"  # a gateway: any cell serves
    assert unit_in(topology, "us-east-c2").name == "us-east-c2"
    assert unit_in(topology, "eu-west").name == "eu-west"
    with pytest.raises(CliError, match=r"split into cells \['us-east-c1', 'us-east-c2'\]"):
        unit_in(topology, "us-east")  # a worker must know its cell
    with pytest.raises(CliError, match="'eu-west' is not one of region 'us-east'"):
        unit_in(topology, "us-east", "eu-west")
