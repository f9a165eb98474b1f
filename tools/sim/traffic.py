"""Traffic models: how many new jobs each region's users submit per second, over time.

Trace files are CSV with a header row, in one of two forms:

* events, one row per job: ``t_seconds,region`` (seconds from the start of the trace);
* rates, one row per minute and region: ``minute,region,jobs`` (jobs submitted in that minute).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


class TrafficModel(Protocol):
    """Jobs per second per region, as a function of simulated time."""

    @property
    def regions(self) -> Sequence[str]: ...

    def rates(self, t: Floats) -> Floats:
        """Rates at times ``t``: shape ``(len(t), len(regions))``, jobs per second."""
        ...


@dataclass(frozen=True)
class Steady:
    """Constant rates."""

    regions: Sequence[str]
    rate: Mapping[str, float]

    def rates(self, t: Floats) -> Floats:
        row = np.array([self.rate[r] for r in self.regions], dtype=np.float64)
        return np.broadcast_to(row, (len(t), len(row))).copy()


@dataclass(frozen=True)
class Diurnal:
    """A daily cosine per region:
    ``mean * (1 + amplitude * cos(2 pi (local_hour - peak_local_hour) / 24))``."""

    regions: Sequence[str]
    mean_rate: Mapping[str, float]
    utc_offset_h: Mapping[str, float]
    amplitude: float = 0.6
    peak_local_hour: float = 20.0

    def rates(self, t: Floats) -> Floats:
        hours = np.asarray(t, dtype=np.float64)[:, None] / 3600.0
        offsets = np.array([self.utc_offset_h[r] for r in self.regions])[None, :]
        means = np.array([self.mean_rate[r] for r in self.regions])[None, :]
        phase = 2 * math.pi * (hours + offsets - self.peak_local_hour) / 24.0
        return np.asarray(means * (1.0 + self.amplitude * np.cos(phase)), dtype=np.float64)


@dataclass(frozen=True)
class Spike:
    """``base`` traffic, with ``region`` at ``rate`` jobs/s from ``start_s`` for ``duration_s``
    (a flash spike: the step is instantaneous)."""

    base: TrafficModel
    region: str
    start_s: float
    duration_s: float
    rate: float

    @property
    def regions(self) -> Sequence[str]:
        return self.base.regions

    def rates(self, t: Floats) -> Floats:
        out = self.base.rates(t)
        inside = (t >= self.start_s) & (t < self.start_s + self.duration_s)
        out[inside, list(self.regions).index(self.region)] = self.rate
        return out


@dataclass(frozen=True)
class TraceRates:
    """Replay of per-bin job counts (``counts[bin, region]`` jobs in ``bin_s`` seconds)."""

    regions: Sequence[str]
    counts: Floats
    bin_s: float = 60.0

    @property
    def duration_s(self) -> float:
        return float(len(self.counts) * self.bin_s)

    def rates(self, t: Floats) -> Floats:
        index = np.clip((np.asarray(t) // self.bin_s).astype(np.int64), 0, len(self.counts) - 1)
        return np.asarray(self.counts[index] / self.bin_s, dtype=np.float64)


@dataclass(frozen=True)
class TraceEvents:
    """Replay of individual submissions: ``times`` (seconds, sorted) from ``regions[home]``."""

    regions: Sequence[str]
    times: Floats
    home: Ints

    @property
    def duration_s(self) -> float:
        return float(self.times[-1]) if len(self.times) else 0.0

    def rates(self, t: Floats) -> Floats:
        return per_minute(self).rates(t)


def per_minute(trace: TraceEvents) -> TraceRates:
    """Bin an event trace into per-minute counts."""
    bins = max(1, math.ceil(trace.duration_s / 60.0 + 1e-9))
    counts = np.zeros((bins, len(trace.regions)))
    np.add.at(counts, (np.minimum(trace.times // 60, bins - 1).astype(np.int64), trace.home), 1)
    return TraceRates(trace.regions, counts, 60.0)


def load_trace(path: str | Path) -> TraceEvents | TraceRates:
    """Read a trace CSV in either documented form; regions in order of first appearance."""
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        rows = list(reader)
    if header[:2] != ("t_seconds", "region") and header[:3] != ("minute", "region", "jobs"):
        raise ValueError(
            f"{path}: header must start with `t_seconds,region` or `minute,region,jobs`, "
            f"got {header}"
        )
    regions: list[str] = []
    index: dict[str, int] = {}
    for row in rows:
        if row["region"] not in index:
            index[row["region"]] = len(regions)
            regions.append(row["region"])
    if header[:2] == ("t_seconds", "region"):
        times = np.array([float(r["t_seconds"]) for r in rows])
        home = np.array([index[r["region"]] for r in rows], dtype=np.int64)
        order = np.argsort(times, kind="stable")
        return TraceEvents(regions, times[order], home[order])
    minutes = [int(r["minute"]) for r in rows]
    counts = np.zeros((max(minutes, default=0) + 1, len(regions)))
    for minute, row in zip(minutes, rows, strict=True):
        counts[minute, index[row["region"]]] += float(row["jobs"])
    return TraceRates(regions, counts, 60.0)


def arrivals(
    model: TrafficModel, start_s: float, end_s: float, rng: np.random.Generator, step_s: float = 1.0
) -> tuple[Floats, Ints]:
    """Submission times (sorted) and home-region indices in ``[start_s, end_s)``.

    Event traces are replayed as they are; other models give a Poisson process whose rate is
    held constant over each ``step_s``.
    """
    if isinstance(model, TraceEvents):
        keep = (model.times >= start_s) & (model.times < end_s)
        return model.times[keep], model.home[keep]
    edges = np.arange(start_s, end_s, step_s)
    widths = np.minimum(edges + step_s, end_s) - edges
    expected = model.rates(edges + widths / 2) * widths[:, None]
    counts = rng.poisson(np.maximum(expected, 0.0))
    total = int(counts.sum())
    flat = counts.ravel()
    cells = np.repeat(np.arange(flat.size), flat)
    bins, home = np.divmod(cells, counts.shape[1])
    times = edges[bins] + rng.random(total) * widths[bins]
    order = np.argsort(times, kind="stable")
    return times[order], home[order].astype(np.int64)
