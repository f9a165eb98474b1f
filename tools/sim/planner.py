"""Capacity planning: GPUs per region for a target p99 and success rate.

Each region is sized on its own (no credit for spilling, so the plan survives a neighbour's
peak) for the busiest minute of the trace. A GPU holds one job and a job is refused when all
are busy, so the share of refused first attempts is Erlang's B formula at the offered load
``jobs/s x mean GPU seconds``. The plan asks for the fewest GPUs whose blocking ``B`` keeps

* the p99: jobs slower than the target are the service tail beyond it plus (conservatively)
  every blocked job, so ``B <= 1% - P(service > target)``;
* the success rate: a job fails only if its retries keep hitting a full region; counting just
  two independent tries, ``B**2 <= 1 - success``.

``verify`` then replays the busiest stretch through the exact simulator on the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tools.sim.service import ServiceTime
from tools.sim.traffic import TraceRates


def erlang_b(servers: int, load: float) -> float:
    """Probability that an arrival finds all ``servers`` busy at ``load`` Erlangs."""
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = load * blocking / (k + load * blocking)
    return blocking


def servers_for(load: float, blocking: float) -> int:
    """The fewest servers whose Erlang-B blocking at ``load`` is at most ``blocking``."""
    if load <= 0:
        return 0
    value, servers = 1.0, 0
    while value > blocking:
        servers += 1
        value = load * value / (servers + load * value)
    return servers


@dataclass(frozen=True)
class RegionPlan:
    region: str
    peak_jobs_per_s: float
    offered_gpus: float
    gpus: int
    blocking: float


def allowed_blocking(service: ServiceTime, p99_s: float, success_rate: float) -> float:
    """The largest first-attempt blocking that meets both targets (see the module docstring)."""
    tail = 1.0 - float(service.cdf(np.array([p99_s]))[0])
    for_p99 = 0.01 - tail
    if for_p99 <= 0:
        raise ValueError(
            f"`p99_s`={p99_s} is below what the model allows: {100 * tail:.2f}% of jobs take "
            f"longer on the GPU alone (service p99 {service.p99_s} s)"
        )
    if not 0 < success_rate < 1:
        raise ValueError(f"`success_rate` must be in (0, 1), got {success_rate}")
    return min(for_p99, math.sqrt(1.0 - success_rate))


def plan(
    trace: TraceRates, service: ServiceTime, p99_s: float, success_rate: float
) -> list[RegionPlan]:
    """GPUs per region for the trace's busiest minute of each region."""
    blocking = allowed_blocking(service, p99_s, success_rate)
    plans = []
    for i, region in enumerate(trace.regions):
        peak = float(trace.counts[:, i].max()) / trace.bin_s
        offered = peak * service.mean_s
        gpus = servers_for(offered, blocking)
        plans.append(RegionPlan(region, peak, offered, gpus, erlang_b(gpus, offered)))
    return plans


def busiest_stretch(trace: TraceRates, minutes: int) -> TraceRates:
    """The ``minutes`` of the trace with the most jobs in all."""
    totals = trace.counts.sum(axis=1)
    width = max(1, min(minutes, len(totals)))
    sums = np.convolve(totals, np.ones(width), mode="valid")
    start = int(np.argmax(sums))
    return TraceRates(trace.regions, trace.counts[start : start + width], trace.bin_s)


def format_plan(plans: list[RegionPlan]) -> str:
    """A fixed-width table of the plan."""
    header = f"{'region':<16} {'peak jobs/s':>11} {'busy GPUs':>9} {'GPUs':>6} {'blocking %':>10}"
    lines = [header, "-" * len(header)]
    for p in plans:
        lines.append(
            f"{p.region:<16} {p.peak_jobs_per_s:>11.2f} {p.offered_gpus:>9.1f} {p.gpus:>6} "
            f"{100 * p.blocking:>10.3f}"
        )
    lines.append(f"{'total':<16} {'':>11} {'':>9} {sum(p.gpus for p in plans):>6}")
    return "\n".join(lines)
