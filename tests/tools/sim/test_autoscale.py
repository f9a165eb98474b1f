"""The backlog autoscaling simulation: a region at zero wakes; a spike is absorbed, not refused."""

from __future__ import annotations

from pathlib import Path

from tools.sim.autoscale import run_all, scenarios, simulate


def test_a_region_at_zero_wakes_and_serves_its_backlog() -> None:
    config = scenarios()[0]
    run = simulate(config)
    summary = run.summary()
    # The wake alarm's minute plus boot: the first job starts within about four minutes.
    assert summary["first_start_s"] <= config.rate[0][0] + 60 + config.boot_s + 60
    assert run.backlog[-1] <= 5 and summary["jobs_started"] > 0.9 * 0.3 * 3500


def test_a_spike_waits_in_the_backlog_and_scales_out_then_in_without_going_below_running(
    tmp_path: Path,
) -> None:
    run = simulate(scenarios()[1])
    assert max(run.live) > run.config.initial_workers and run.backlog[-1] == 0
    assert all(live >= busy for live, busy in zip(run.live, run.in_flight, strict=True))
    assert run.live[-1] < max(run.live)  # the idle policy scaled in afterwards
    assert set(run_all(tmp_path)) == {"scale-from-zero", "spike-backlog"}
    assert (tmp_path / "spike-backlog.png").exists()
