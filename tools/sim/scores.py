"""What a run achieved: success, latency, locality, GPU use and retry amplification."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tools.sim.engine import SimResult
from tools.sim.record import LATENCY_BIN_S


@dataclass(frozen=True)
class Summary:
    """Metrics over the jobs submitted in one window (optionally from one home region).

    ``cross_region_share`` counts served jobs that ran outside their home region;
    ``gpu_utilization`` is the mean share of GPUs busy (of the home region's GPUs when the
    summary is for one region); ``amplification`` is admission attempts per job.
    """

    label: str
    jobs: int
    success_rate: float
    p50_s: float
    p99_s: float
    cross_region_share: float
    gpu_utilization: float
    amplification: float


def summarize(
    result: SimResult,
    window: tuple[float, float] | None = None,
    home: str | None = None,
    label: str | None = None,
) -> Summary:
    """Summarize the jobs submitted in ``window`` (whole run if ``None``) from ``home``.

    Windows are rounded to the recorder's bins (latency to its latency blocks).
    """
    record = result.record
    t0, t1 = window or (0.0, result.config.duration_s)
    regions = slice(None) if home is None else [record.regions.index(home)]
    bins = slice(int(t0 // record.bin_s), math.ceil(t1 / record.bin_s))
    blocks = slice(int(t0 // record.latency_block_s), math.ceil(t1 / record.latency_block_s))
    jobs = int(record.jobs[bins, regions].sum())
    served = int(record.served[bins, regions].sum())
    histogram = record.latency[blocks, regions].sum(axis=(0, 1))
    p50, p99 = percentiles(histogram, (0.5, 0.99))
    sample_t = result.sample_t
    inside = (sample_t >= t0) & (sample_t < t1)
    gpus = result.config.world.gpus
    capacity = sum(gpus.values()) if home is None else gpus[home]
    busy = result.busy[inside][:, regions].sum(axis=1) if inside.any() else np.zeros(1)
    return Summary(
        label=label or result.config.label,
        jobs=jobs,
        success_rate=served / jobs if jobs else math.nan,
        p50_s=p50,
        p99_s=p99,
        cross_region_share=int(record.cross[bins, regions].sum()) / served if served else math.nan,
        gpu_utilization=float(busy.mean()) / capacity if capacity else math.nan,
        amplification=int(record.attempts[bins, regions].sum()) / jobs if jobs else math.nan,
    )


def percentiles(histogram: np.ndarray, quantiles: Sequence[float]) -> tuple[float, float]:
    """Quantiles of a latency histogram, interpolated within a bin."""
    total = histogram.sum()
    if total == 0:
        return math.nan, math.nan
    cumulative = np.cumsum(histogram) / total
    out = []
    for q in quantiles:
        i = int(np.searchsorted(cumulative, q))
        below = cumulative[i - 1] if i else 0.0
        inside = (q - below) / (cumulative[i] - below) if cumulative[i] > below else 0.0
        out.append((i + inside) * LATENCY_BIN_S)
    return out[0], out[1]


def excess_share(result: SimResult, window: tuple[float, float], home: str) -> float:
    """Share of ``home``'s offered traffic in ``window`` above its GPU capacity: the least
    cross-region share that lets every job run."""
    grid = np.arange(window[0], window[1], 1.0) + 0.5
    rates = result.config.traffic.rates(grid)[:, list(result.config.traffic.regions).index(home)]
    capacity = result.config.world.gpus[home] / result.config.service.mean_s
    offered = float(rates.sum())
    return float(np.maximum(rates - capacity, 0).sum()) / offered if offered else 0.0


def format_table(rows: Sequence[Summary], title: str = "") -> str:
    """A fixed-width table, one row per summary."""
    header = (
        f"{'policy + retries':<28} {'jobs':>10} {'success %':>9} {'p50 s':>6} {'p99 s':>6} "
        f"{'cross %':>7} {'GPU %':>6} {'att/job':>7}"
    )
    lines = [title] if title else []
    lines += [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.label:<28} {row.jobs:>10} {100 * row.success_rate:>9.3f} {row.p50_s:>6.2f} "
            f"{row.p99_s:>6.2f} {100 * row.cross_region_share:>7.2f} "
            f"{100 * row.gpu_utilization:>6.1f} {row.amplification:>7.2f}"
        )
    return "\n".join(lines)
