"""PNG plots of simulation runs over time (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from tools.sim.engine import SimResult
from tools.sim.scores import percentiles

SMOOTH_S = 10.0


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, numerator / np.maximum(denominator, 1), np.nan)


def _binned(array: np.ndarray, columns: slice | list[int], group: int) -> np.ndarray:
    """``array[bin, region]`` summed over ``columns``, then over runs of ``group`` bins."""
    summed = array[:, columns].sum(axis=1)
    binned: np.ndarray = summed[: len(summed) // group * group].reshape(-1, group).sum(axis=1)
    return binned


def plot_runs(
    results: Sequence[SimResult],
    path: Path,
    focus: str | None = None,
    title: str = "",
    zoom: tuple[float, float] | None = None,
) -> Path:
    """Success rate, attempts per job, p99 latency, GPU utilization and the home share of the
    table (or the cross-region share) over time, one line per run (colour: policy, line: retry
    mode); for ``focus`` (a home region) or the whole fleet. Jobs count at their submission.
    Counts are summed over ``SMOOTH_S`` seconds; ``zoom`` (simulated seconds) plots just that
    stretch, in seconds, at the recorder's own resolution."""
    fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    scale = 1.0 if zoom else 60.0
    policies = list(dict.fromkeys(result.config.policy.name for result in results))
    for result in results:
        record = result.record
        columns = slice(None) if focus is None else [record.regions.index(focus)]
        group = 1 if zoom else max(1, round(SMOOTH_S / record.bin_s))
        at = (np.arange(len(record.jobs) // group) + 0.5) * group * record.bin_s / scale

        jobs = _binned(record.jobs, columns, group)
        style = {
            "label": result.config.label,
            "color": f"C{policies.index(result.config.policy.name) % 10}",
            "linestyle": "--" if result.config.retry.name == "naive" else "-",
        }
        axes[0].plot(at, 100 * _ratio(_binned(record.served, columns, group), jobs), **style)
        axes[1].plot(at, _ratio(_binned(record.attempts, columns, group), jobs), **style)
        blocks = record.latency[:, columns].sum(axis=1)
        p99 = [percentiles(block, (0.5, 0.99))[1] for block in blocks]
        block_at = (np.arange(len(blocks)) + 0.5) * record.latency_block_s / scale
        axes[2].plot(block_at, p99, drawstyle="steps-mid", **style)
        gpus = result.config.world.gpus
        capacity = sum(gpus.values()) if focus is None else gpus[focus]
        sample_at = result.sample_t / scale
        axes[3].plot(sample_at, 100 * result.busy[:, columns].sum(axis=1) / capacity, **style)
        if focus is not None:
            axes[4].plot(sample_at, result.kept_home[:, record.regions.index(focus)], **style)
        else:
            axes[4].plot(at, 100 * _ratio(_binned(record.cross, columns, group), jobs), **style)
    axes[0].set_ylabel("success %")
    axes[1].set_ylabel("attempts per job")
    axes[2].set_ylabel("p99 end-to-end s")
    axes[3].set_ylabel("GPU utilization %")
    axes[4].set_ylabel("table share kept home" if focus else "cross-region %")
    axes[4].set_xlabel("simulated seconds" if zoom else "simulated minutes")
    if zoom:
        axes[4].set_xlim(zoom[0], zoom[1])
    for axis in axes:
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title or (f"home region {focus}" if focus else "whole fleet"))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_regions(result: SimResult, path: Path, title: str = "") -> Path:
    """Per-region GPU utilization over time as a heat map (for long, many-region runs)."""
    gpus = np.array([result.config.world.gpus[r] for r in result.record.regions], dtype=float)
    utilization = 100 * result.busy / gpus[None, :]
    fig, axis = plt.subplots(figsize=(11, 5))
    hours = result.sample_t / 3600.0
    image = axis.imshow(
        utilization.T,
        aspect="auto",
        origin="lower",
        extent=(float(hours[0]), float(hours[-1]), -0.5, len(gpus) - 0.5),
        vmin=0,
        vmax=100,
        cmap="viridis",
    )
    axis.set_yticks(range(len(gpus)), result.record.regions, fontsize=7)
    axis.set_xlabel("simulated hours")
    fig.colorbar(image, label="GPU utilization %")
    axis.set_title(title or result.config.label)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class CacheOutcome(Protocol):
    """One policy at one load (read-only, as the simulators' frozen dataclasses are)."""

    @property
    def policy(self) -> str: ...
    @property
    def load(self) -> float: ...
    @property
    def hit_rate(self) -> float: ...
    @property
    def mean_latency_s(self) -> float: ...
    @property
    def p95_latency_s(self) -> float: ...


def plot_cache_placement(
    outcomes: Sequence[CacheOutcome], labels: dict[str, str], thing: str, path: Path
) -> Path:
    """Hit rate and mean latency (log scale) against load, one line per placement policy."""
    figure, (hit_axis, latency_axis) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    for policy, label in labels.items():
        rows = [o for o in outcomes if o.policy == policy]
        loads = [o.load for o in rows]
        hit_axis.plot(loads, [o.hit_rate for o in rows], marker="o", label=label)
        latency_axis.semilogy(loads, [o.mean_latency_s for o in rows], marker="o", label=label)
    hit_axis.set(xlabel="load", ylabel=f"{thing} hit rate", title=f"{thing} held at job start")
    latency_axis.set(xlabel="load", ylabel="mean latency (s, log)", title="mean job latency")
    for axis in (hit_axis, latency_axis):
        axis.grid(True, alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def report_cache_placement(
    outcomes: Sequence[CacheOutcome],
    labels: dict[str, str],
    thing: str,
    out: Path,
    name: str,
    document: dict[str, Any],
) -> Path:
    """Print the policies' table (mean latency against the first policy of ``labels`` at the
    same load), write ``document`` to ``<out>/<name>.json`` and the plot to ``<name>.png``."""
    baseline = next(iter(labels))
    by = {(o.load, o.policy): o for o in outcomes}
    header = ("load", "policy", "hit rate", "mean s", "p95 s", f"mean vs {baseline}")
    print("{:>5} {:<8} {:>8} {:>7} {:>7} {:>16}".format(*header))
    for o in outcomes:
        ratio = o.mean_latency_s / by[(o.load, baseline)].mean_latency_s
        print(
            f"{o.load:>5.2f} {o.policy:<8} {o.hit_rate:>8.1%} {o.mean_latency_s:>7.2f} "
            f"{o.p95_latency_s:>7.2f} {ratio:>15.2f}x"
        )
    (out / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")
    path = plot_cache_placement(outcomes, labels, thing, out / f"{name}.png")
    print(f"plot: {path}")
    return path
