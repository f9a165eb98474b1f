"""How many cells a region needs for a submit rate (``python -m tools.sim.cells``).

A cell's Redis takes every submit of the tenants whose cell it is (the dispatcher's rendezvous
hash, :meth:`animfleet.topology.Topology.cell_for`, run here on the same topology code), so
the busiest cell carries the largest tenant-weighted share, not ``1 / cells``: a tenant's jobs
are never split, and a few tenants dominate real traffic. The tenants' rates follow a Zipf law
(exponent ``--zipf``; 0 is uniform). A region needs the fewest cells whose busiest Redis stays
below ``--headroom`` of the submits/s one Redis serves on a core: ``--capacity``, or the figure
``make bench-cells`` measured (``--bench run/bench-cells/result.json``). One tenant faster than
that alone fits no number of cells: it is reported as such. ``animfleet plan --file TRACE
--redis-capacity N`` (or ``--bench``) adds the same answer per region of a trace, at its peak.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from animfleet.topology import Topology
from tools.sim.traffic import TraceRates

REGION = "region"


@dataclass(frozen=True)
class CellLoad:
    """The busiest cell of a region split ``cells`` ways, under one tenant mix and rate."""

    cells: int
    busiest_share: float  # of the region's submits
    busiest_per_s: float
    utilization: float  # of one Redis core


def tenant_rates(rate_per_s: float, tenants: int, zipf: float) -> dict[str, float]:
    """``tenants`` tenants sharing ``rate_per_s``, the k-th in proportion to ``1 / k**zipf``."""
    weights = [1.0 / (rank**zipf) for rank in range(1, tenants + 1)]
    total = sum(weights)
    return {f"tenant-{rank}": rate_per_s * w / total for rank, w in enumerate(weights, 1)}


def split_region(cells: int) -> Topology:
    """A topology of one region split into ``cells`` cells (the URLs are never dialled)."""
    regions: dict[str, object] = {REGION: {"cells": cells}}
    for index in range(1, cells + 1):
        regions[f"{REGION}-c{index}"] = {"broker_url": f"redis://cell-{index}:6379/0"}
    return Topology.from_mapping({"regions": regions}, env={})


def cell_load(rates: dict[str, float], cells: int, capacity_per_s: float) -> CellLoad:
    """Where the tenants land with ``cells`` cells, and the busiest cell's load."""
    topology = split_region(cells)
    per_cell = dict.fromkeys(topology.cells_of(REGION), 0.0)
    for tenant, rate in rates.items():
        per_cell[topology.cell_for(REGION, tenant)] += rate
    busiest = max(per_cell.values())
    total = sum(rates.values())
    return CellLoad(cells, busiest / total, busiest, busiest / capacity_per_s)


def cells_needed(
    rates: dict[str, float], capacity_per_s: float, headroom: float = 0.7, most: int = 64
) -> tuple[int | None, list[CellLoad]]:
    """The fewest cells (up to ``most``) whose busiest Redis stays at or below ``headroom`` of
    a core, with the load at each count tried; ``None`` when no count does."""
    tried = []
    for cells in range(1, most + 1):
        load = cell_load(rates, cells, capacity_per_s)
        tried.append(load)
        if load.utilization <= headroom:
            return cells, tried
        if max(rates.values()) > headroom * capacity_per_s:
            break  # one tenant alone is over: more cells cannot help
    return None, tried


def peak_rates(rates: TraceRates) -> dict[str, float]:
    """Each region's busiest bin of a trace, in submits/s."""
    peaks = np.asarray(rates.counts, dtype=np.float64).max(axis=0) / rates.bin_s
    return {region: float(peak) for region, peak in zip(rates.regions, peaks, strict=True)}


def format_cells(
    peaks: dict[str, float], capacity_per_s: float, tenants: int, zipf: float, headroom: float
) -> str:
    """Per region: its peak submits/s and the cells it needs (``plan``'s cells table)."""
    lines = [
        f"cells per region: one Redis {capacity_per_s:.0f} submits/s on a core, headroom "
        f"{headroom:.0%}, {tenants} tenants (Zipf {zipf:g}) per region",
        f"{'region':<16}{'peak /s':>10}{'cells':>7}{'busiest cell':>14}",
    ]
    for region, peak in peaks.items():
        needed, tried = cells_needed(tenant_rates(peak, tenants, zipf), capacity_per_s, headroom)
        shown = "none fits" if needed is None else str(needed)
        busiest = f"{tried[-1].utilization:.0%}" if tried else "-"
        lines.append(f"{region:<16}{peak:>10.1f}{shown:>7}{busiest:>14}")
    return "\n".join(lines)


def capacity_from_bench(path: Path) -> float:
    """The submits/s one Redis serves on a core, from ``make bench-cells``'s result."""
    return float(json.loads(path.read_text())["redis_submits_per_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, required=True, help="the region's submits/s")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--capacity", type=float, help="submits/s one Redis serves on a core")
    source.add_argument("--bench", type=Path, help="make bench-cells's result.json")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--zipf", type=float, default=1.0, help="tenant skew (0: uniform)")
    parser.add_argument("--headroom", type=float, default=0.7, help="of a core, at most")
    args = parser.parse_args(argv)
    capacity = args.capacity if args.bench is None else capacity_from_bench(args.bench)
    rates = tenant_rates(args.rate, args.tenants, args.zipf)
    needed, tried = cells_needed(rates, capacity, args.headroom)
    print(
        f"{args.rate:g} submits/s from {args.tenants} tenants (Zipf {args.zipf:g}); "
        f"one Redis: {capacity:.0f} submits/s on a core; headroom {args.headroom:.0%}"
    )
    print(f"{'cells':>5}{'busiest share':>15}{'busiest /s':>12}{'of a core':>11}")
    for load in tried:
        print(
            f"{load.cells:>5}{load.busiest_share:>15.1%}{load.busiest_per_s:>12.0f}"
            f"{load.utilization:>11.0%}"
        )
    if needed is None:
        top = max(rates.values())
        print(f"no cell count fits: the largest tenant alone sends {top:.0f} submits/s")
        return 1
    print(f"cells needed: {needed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
