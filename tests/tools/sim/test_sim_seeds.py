"""The seeds' router (ring shares, no fallback) on a reduced spike: naive retries cascade while
the table still keeps the spike home, backoff plus the execution delay does not."""

from __future__ import annotations

import pytest

from dispatcher.routing import RegionLoad
from tools.sim.engine import SimResult, run_exact
from tools.sim.policies import POLICIES
from tools.sim.scenarios import Scenario, spike
from tools.sim.scores import Summary, summarize
from tools.sim.spike_checks import spike_checks
from tools.sim.world import make_world


@pytest.fixture(scope="module")
def runs() -> tuple[Scenario, dict[str, SimResult]]:
    scenario = spike(spike_s=60.0, policies=["seeds-router"], modes=["naive", "backoff"])
    return scenario, {c.retry.name: run_exact(c) for c in scenario.configs}


def onset(scenario: Scenario, result: SimResult) -> Summary:
    assert scenario.onset is not None and scenario.focus is not None
    return summarize(result, scenario.onset, scenario.focus)


def test_seeds_router_has_the_ring_shares_without_a_fallback() -> None:
    world = make_world(10, 100)
    loads = {n: RegionLoad(n, 100, 60, 0, demand=60.0) for n in world.names}
    loads["us-east"] = RegionLoad("us-east", 100, 100, 5, demand=150.0)
    ring = POLICIES["ring-router"].table(world.topology, loads, None, 0.0)
    seeds = POLICIES["seeds-router"].table(world.topology, loads, None, 0.0)
    assert seeds.shares == ring.shares
    assert ring.fallback["us-east"] and not seeds.fallback.get("us-east")


def test_naive_retries_cascade_while_the_table_keeps_the_spike_home(
    runs: tuple[Scenario, dict[str, SimResult]],
) -> None:
    scenario, results = runs
    naive = onset(scenario, results["naive"])
    assert naive.amplification >= 3.0
    assert naive.success_rate < 0.9
    assert naive.cross_region_share == 0.0


def test_backoff_and_delay_remove_the_cascade(
    runs: tuple[Scenario, dict[str, SimResult]],
) -> None:
    scenario, results = runs
    naive, backoff = onset(scenario, results["naive"]), onset(scenario, results["backoff"])
    assert backoff.amplification < 3.0
    assert backoff.amplification < 0.6 * naive.amplification
    assert backoff.success_rate >= 0.99


def test_the_bar_reports_the_cascade_and_its_fix(
    runs: tuple[Scenario, dict[str, SimResult]],
) -> None:
    scenario, results = runs
    checks = spike_checks(scenario, list(results.values()))
    assert len(checks) == 5  # the ring router's checks are left out: it was not run
    assert all(check.ok for check in checks), [check.line for check in checks]
