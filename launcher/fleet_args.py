"""The topology and regions a command line names (``--fleet``, ``--region``), each checked with
one clear line instead of a traceback."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from launcher.command_errors import EX_USAGE, CliError, problem

if TYPE_CHECKING:
    from animfleet.topology import Region, Topology


def topology_of(args: argparse.Namespace) -> Topology:
    """The topology of ``--fleet``, else ``$ANIMFLEET_FLEET_FILE``, else the built-in one."""
    from animfleet.topology import Topology

    try:
        return Topology.load(args.fleet)
    except FileNotFoundError as error:
        raise CliError(f"fleet file not found: {error.filename}", EX_USAGE) from None
    except OSError as error:
        raise CliError(f"cannot read fleet file {error.filename}: {error.strerror}") from None
    except ValueError as error:  # TOML syntax and pydantic validation errors are ValueErrors
        where = args.fleet or os.environ.get("ANIMFLEET_FLEET_FILE") or "(built-in)"
        raise CliError(f"invalid fleet file {where}: {problem(error)}", EX_USAGE) from None


def region_in(topology: Topology, name: str) -> Region:
    try:
        return topology.region(name)
    except KeyError as error:  # its message names the region and the known ones
        raise CliError(str(error.args[0]), EX_USAGE) from None


def unit_in(topology: Topology, name: str, cell: str | None = None) -> Region:
    """The unit a one-unit process serves (a worker, a gateway, a webhook sender): ``name``
    itself, or for a region split into cells, ``cell`` (the host's cell, e.g. from
    ``ANIMFLEET_WORKER_CELL``), else its first cell when ``cell`` is ``""``."""
    try:
        cells = topology.cells_of(name)
    except KeyError as error:
        raise CliError(str(error.args[0]), EX_USAGE) from None
    if cells == [name]:
        return region_in(topology, name)
    if cell is None:
        raise CliError(
            f"region {name!r} is split into cells {cells}: name one with --region", EX_USAGE
        )
    if cell and cell not in cells:
        raise CliError(f"cell {cell!r} is not one of region {name!r}'s cells {cells}", EX_USAGE)
    return region_in(topology, cell or cells[0])


def regions_of(args: argparse.Namespace, names: list[str] | None) -> list[Region]:
    """The regions named (all when none), each checked; a region split into cells names its
    cells."""
    topology = topology_of(args)
    units: list[str] = []
    for name in names or topology.names:
        try:
            units += topology.cells_of(name)
        except KeyError as error:
            raise CliError(str(error.args[0]), EX_USAGE) from None
    return [region_in(topology, unit) for unit in dict.fromkeys(units)]
