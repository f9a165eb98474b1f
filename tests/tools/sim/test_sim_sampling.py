"""The sampled mode (a 1/N slice of the fleet) agrees with the exact run on a small case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tools.sim.engine import run_exact
from tools.sim.scenarios import sampled, sampling_check
from tools.sim.scores import summarize


def test_sampled_slice_agrees_with_the_full_fleet() -> None:
    scenario = sampling_check(regions=5, requests_per_day=20e6, minutes=4, sample_every=4)
    exact_config, _ = scenario.configs
    exact = summarize(run_exact(exact_config), scenario.window)
    slice_ = summarize(run_exact(sampled(exact_config, 4)), scenario.window)
    assert exact.jobs / slice_.jobs == pytest.approx(4, rel=0.05)
    assert abs(slice_.success_rate - exact.success_rate) <= 0.005
    assert abs(slice_.gpu_utilization - exact.gpu_utilization) <= 0.03
    assert abs(slice_.cross_region_share - exact.cross_region_share) <= 0.03
    assert abs(slice_.p99_s - exact.p99_s) <= 0.3


def test_sampling_keeps_every_region_alive() -> None:
    scenario = sampling_check(regions=3, requests_per_day=1e5, minutes=2)
    tiny = sampled(replace(scenario.configs[0]), 1000)
    assert all(count >= 1 for count in tiny.world.gpus.values())
