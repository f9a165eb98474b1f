"""The add-on placement simulation: holding add-ons where they are asked for pays."""

from __future__ import annotations

from pathlib import Path

from tools.sim.addon_placement import AddonWorld, plot, simulate


def test_aware_placement_hits_more_and_waits_less(tmp_path: Path) -> None:
    world = AddonWorld(jobs=3000)
    naive, aware = simulate(world, "any", 0.8), simulate(world, "aware", 0.8)
    assert aware.hit_rate > naive.hit_rate + 0.1
    assert aware.mean_latency_s < naive.mean_latency_s
    assert simulate(world, "aware", 0.8) == aware  # deterministic by seed
    assert plot([naive, aware], tmp_path / "addons.png").stat().st_size > 0
