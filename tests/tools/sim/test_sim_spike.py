"""The simulator on a reduced spike: the ring router with backoff holds, naive retries cascade."""

from __future__ import annotations

import numpy as np
import pytest

from tools.sim.engine import run_exact
from tools.sim.scenarios import spike
from tools.sim.scores import Summary, excess_share, summarize


def run(policy: str, mode: str, seed: int = 0) -> tuple[Summary, Summary, float]:
    scenario = spike(gpus=100, spike_s=180.0, policies=[policy], modes=[mode], seed=seed)
    (config,) = scenario.configs
    result = run_exact(config)
    assert scenario.focus is not None
    during = summarize(result, scenario.window, scenario.focus)
    quiet = summarize(result, (0.0, scenario.window[0]), scenario.focus)
    return during, quiet, excess_share(result, scenario.window, scenario.focus)


def test_ring_router_with_backoff_meets_the_bar() -> None:
    during, quiet, excess = run("ring-router", "backoff")
    assert excess == pytest.approx(1 / 3, abs=0.01)
    assert during.success_rate >= 0.999
    assert during.p99_s <= 1.5 * quiet.p99_s
    assert during.cross_region_share <= excess + 0.05
    assert during.amplification < 1.5


def test_naive_retries_cascade_when_the_spike_cannot_spill() -> None:
    during, _, _ = run("home-only", "naive")
    assert during.amplification >= 3.0
    assert during.success_rate < 0.8


def test_same_seed_same_outcome() -> None:
    first = run("ring-router", "backoff", seed=4)[0]
    again = run("ring-router", "backoff", seed=4)[0]
    assert first == again
    assert np.isfinite(first.p99_s)
