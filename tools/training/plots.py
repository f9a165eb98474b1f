"""Figures written by training and evaluation (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the Agg backend is chosen before pyplot loads


def plot_loss(
    losses: list[tuple[int, float]],
    path: Path,
    ylabel: str = "x0 MSE + flow MSE",
    title: str = "animfleet-small training loss",
) -> Path:
    """Training loss (mean over 25-step windows) against step, log scale."""
    steps, values = zip(*losses, strict=True)
    figure, axis = plt.subplots(figsize=(6, 3.5), dpi=100)
    axis.plot(steps, values, linewidth=1)
    axis.set_yscale("log")
    axis.set_xlabel("step")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
