"""One region scaling on its backlog: the Terraform policies of ``region_fleet/scaling.tf``
played against traffic, one simulated second at a time.

- target tracking on ``(backlog + in_flight) / max(live, 1)`` at ``1 + wait / job`` (scale-out
  only, evaluated each minute);
- the wake alarm: a backlog with no instance starts one;
- the idle scale-in: one instance less after ``idle_minutes`` of idle workers and no backlog;
- instances take ``boot_s`` (boot and model load) before their worker is live.

Scenarios: ``scale-from-zero`` (a region at zero instances receives steady traffic) and
``spike-backlog`` (a region at half load takes 3x that for ten minutes; nothing is refused).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class AutoscaleConfig:
    name: str
    rate: tuple[tuple[float, float], ...]  # (from second, jobs per second), in order
    duration_s: float
    initial_workers: int = 0
    job_s: float = 30.0
    acceptable_wait_s: float = 60.0
    boot_s: float = 180.0
    max_workers: int = 60
    idle_minutes: int = 10
    seed: int = 0

    def rate_at(self, t: float) -> float:
        current = 0.0
        for start, value in self.rate:
            if t >= start:
                current = value
        return current


@dataclass
class AutoscaleRun:
    config: AutoscaleConfig
    t: list[float] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    live: list[int] = field(default_factory=list)
    desired: list[int] = field(default_factory=list)
    waits: list[tuple[float, float]] = field(default_factory=list)  # (submitted, wait s)

    def summary(self) -> dict[str, float]:
        waits = np.array([w for _, w in self.waits]) if self.waits else np.zeros(1)
        first = min((s + w for s, w in self.waits), default=math.nan)
        return {
            "jobs_started": len(self.waits),
            "first_start_s": first,
            "backlog_peak": max(self.backlog),
            "workers_peak": max(self.live),
            "wait_p50_s": float(np.percentile(waits, 50)),
            "wait_p99_s": float(np.percentile(waits, 99)),
            "refused": 0,
        }


def simulate(config: AutoscaleConfig) -> AutoscaleRun:
    rng = np.random.default_rng(config.seed)
    run = AutoscaleRun(config)
    target = 1 + config.acceptable_wait_s / config.job_s
    backlog: deque[float] = deque()  # submit times, FIFO
    busy = 0
    live = config.initial_workers
    booting: deque[float] = deque()  # when each booting instance goes live
    desired = config.initial_workers
    idle_streak = 0
    for step in range(int(config.duration_s)):
        t = float(step)
        backlog.extend([t] * int(rng.poisson(config.rate_at(t))))
        busy -= int(rng.binomial(busy, 1.0 / config.job_s))  # completions this second
        while booting and booting[0] <= t:
            booting.popleft()
            live += 1
        live = min(live, desired)  # a scale-in drains an instance once its job ends
        while backlog and busy < live:  # the scheduler: a free GPU takes the next job
            run.waits.append((backlog[0], t - backlog.popleft()))
            busy += 1
        if step % 60 == 0:  # alarms and target tracking evaluate each minute
            signal = (len(backlog) + busy) / max(live, 1)
            wanted = math.ceil(max(live, 1) * signal / target) if signal > target else 0
            if live + len(booting) == 0 and backlog:  # the wake alarm
                wanted = max(wanted, 1)
            idle_streak = idle_streak + 1 if not backlog and live - busy >= 1 else 0
            if idle_streak >= config.idle_minutes and desired > busy:
                desired, idle_streak = desired - 1, 0
            if wanted > desired:
                desired = min(config.max_workers, wanted)
            booting.extend([t + config.boot_s] * max(0, desired - live - len(booting)))
        run.t.append(t)
        run.backlog.append(len(backlog))
        run.in_flight.append(busy)
        run.live.append(live)
        run.desired.append(desired)
    return run


def scenarios(seed: int = 0) -> list[AutoscaleConfig]:
    half = 0.5 * 10 / 30.0  # half of ten 30-second GPUs
    return [
        AutoscaleConfig("scale-from-zero", ((60.0, 0.3),), 3600.0, 0, seed=seed),
        AutoscaleConfig(
            "spike-backlog", ((0.0, half), (600.0, 3 * half), (1200.0, half)), 3600.0, 10,
            seed=seed,
        ),
    ]  # fmt: skip


def plot(run: AutoscaleRun, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array(run.t) / 60.0
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    top.plot(t, [run.config.rate_at(s) * 60 for s in run.t], label="arrivals per minute")
    top.set_ylabel("jobs / min")
    top.legend(loc="upper right")
    middle.plot(t, run.backlog, label="backlog")
    middle.plot(t, run.in_flight, label="in flight")
    middle.set_ylabel("jobs")
    middle.legend(loc="upper right")
    bottom.plot(t, run.live, label="live workers")
    bottom.plot(t, run.desired, "--", label="desired")
    starts = [(s + w) / 60.0 for s, w in run.waits]
    twin = bottom.twinx()
    twin.scatter(starts, [w for _, w in run.waits], s=2, color="gray", alpha=0.3, label="wait")
    twin.set_ylabel("wait before start (s)")
    bottom.set_ylabel("workers")
    bottom.set_xlabel("minutes")
    bottom.legend(loc="upper left")
    fig.suptitle(f"animfleet autoscaling on the backlog: {run.config.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_all(out: Path, seed: int = 0) -> dict[str, dict[str, float]]:
    """Simulate both scenarios, write a PNG each, return their summaries."""
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for config in scenarios(seed):
        run = simulate(config)
        plot(run, out / f"{config.name}.png")
        results[config.name] = run.summary()
    return results
