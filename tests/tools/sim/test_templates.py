"""The template-cache placement simulator: caches change hit rates and latency as expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.sim.templates import POLICIES, TemplateWorld, main, simulate, trace

WORLD = TemplateWorld(workers=4, templates=40, capacity=6, jobs=3000)


def test_the_same_trace_feeds_every_policy() -> None:
    assert trace(WORLD, 0.6, seed=1) == trace(WORLD, 0.6, seed=1)
    assert trace(WORLD, 0.6, seed=1) != trace(WORLD, 0.6, seed=2)


def test_cache_aware_balancing_hits_more_and_waits_less_than_compute_only() -> None:
    for load in (0.5, 0.7):
        compute, cache, fleet = (simulate(WORLD, policy, load) for policy in POLICIES)
        assert cache.hit_rate > compute.hit_rate + 0.1
        assert cache.mean_latency_s < compute.mean_latency_s
        # The fleet's rule (idle holders first) helps while workers are idle, less than the
        # cost rule, which also queues behind a busy holder.
        assert compute.hit_rate < fleet.hit_rate < cache.hit_rate
        assert fleet.mean_latency_s < compute.mean_latency_s


def test_with_free_loading_placement_cannot_matter() -> None:
    free = TemplateWorld(workers=4, templates=40, capacity=6, jobs=2000, load_s=0.0)
    outcomes = [simulate(free, policy, 0.5) for policy in POLICIES]
    # Nothing to save: every policy's latency is the bare service time plus queueing.
    assert all(o.mean_latency_s >= free.service_s for o in outcomes)
    assert max(o.mean_latency_s for o in outcomes) < 1.5 * free.service_s


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate(WORLD, "random", 0.5)


def test_main_writes_the_report_and_plot(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path), "--loads", "0.5", "--jobs", "500"]) == 0
    assert (tmp_path / "templates.json").stat().st_size > 0
    assert (tmp_path / "templates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
