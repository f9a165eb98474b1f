"""The simulator sizes a region's cells from the tenants' rates and one Redis's capacity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.sim.cells import capacity_from_bench, cell_load, cells_needed, main, tenant_rates


def test_uniform_tenants_spread_almost_evenly_and_the_count_follows_the_rate() -> None:
    rates = tenant_rates(10_000.0, 2000, zipf=0.0)
    assert cell_load(rates, 1, 8000.0).busiest_share == pytest.approx(1.0)
    four = cell_load(rates, 4, 8000.0)
    assert 0.25 <= four.busiest_share < 0.29  # hashing leaves the busiest a little over 1/4
    needed, tried = cells_needed(rates, capacity_per_s=8000.0, headroom=0.7)
    assert needed == 2  # 10,000/s needs > 1.25 Redis cores at 70 %: two cells of ~5,000/s
    assert [load.cells for load in tried] == [1, 2]
    assert tried[-1].utilization <= 0.7 < tried[0].utilization
    assert cells_needed(tenant_rates(40_000.0, 2000, 0.0), 8000.0)[0] == 8


def test_skewed_tenants_need_more_cells_and_one_huge_tenant_fits_none() -> None:
    uniform = cells_needed(tenant_rates(20_000.0, 1000, 0.0), 8000.0)[0]
    skewed = cells_needed(tenant_rates(20_000.0, 1000, 0.8), 8000.0)[0]
    assert uniform is not None and skewed is not None and skewed > uniform
    needed, tried = cells_needed(tenant_rates(50_000.0, 1000, 1.5), 8000.0)
    assert needed is None and len(tried) < 64  # a tenant of ~19,000/s alone: gives up early


def test_the_command_reads_the_bench_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"redis_submits_per_s": 5000.0}))
    assert capacity_from_bench(result) == 5000.0
    assert main(["--rate", "9000", "--bench", str(result), "--zipf", "0"]) == 0
    out = capsys.readouterr().out
    assert "cells needed: 3" in out  # 9,000/s over 3,500/s per Redis (70 % of 5,000)


def test_plan_sizes_each_regions_cells_at_its_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from launcher.command import main as animfleet

    trace = tmp_path / "rates.csv"
    # us-east peaks at 20,000 submits/s (minute 1), eu-west at 500
    trace.write_text("minute,region,jobs\n0,us-east,60000\n1,us-east,1200000\n1,eu-west,30000\n")
    argv = ["plan", "--file", str(trace), "--verify-minutes", "0", "--redis-capacity", "8000"]
    animfleet([*argv, "--zipf", "0"])
    table = capsys.readouterr().out.split("cells per region")[1]
    rows = {line.split()[0]: line.split()[1:3] for line in table.splitlines()[2:]}
    assert rows == {"us-east": ["20000.0", "4"], "eu-west": ["500.0", "1"]}
