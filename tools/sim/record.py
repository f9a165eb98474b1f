"""Outcomes aggregated while a simulation runs, so memory does not grow with the job count."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

LATENCY_BIN_S = 0.02
LATENCY_MAX_S = 120.0


class Recorder:
    """Per time bin (by submission time) and home region: jobs, served, failed, cross-region,
    attempts; per latency block and home: an end-to-end latency histogram; per sample: busy GPUs.

    Args:
        regions: region names, in the simulator's order.
        duration_s: simulated seconds of submissions.
        bin_s: width of the counting bins (the time-series resolution).
        latency_block_s: width of the latency-histogram blocks (a multiple of ``bin_s``);
            window summaries get exact percentiles when windows are aligned to it.
    """

    def __init__(
        self, regions: Sequence[str], duration_s: float, bin_s: float, latency_block_s: float
    ) -> None:
        self.regions = list(regions)
        self.bin_s = bin_s
        self.latency_block_s = latency_block_s
        n_bins = max(1, math.ceil(duration_s / bin_s))
        n_blocks = max(1, math.ceil(duration_s / latency_block_s))
        size = len(self.regions)
        self.jobs = np.zeros((n_bins, size), dtype=np.int64)
        self.served = np.zeros((n_bins, size), dtype=np.int64)
        self.cross = np.zeros((n_bins, size), dtype=np.int64)
        self.attempts = np.zeros((n_bins, size), dtype=np.int64)
        self.latency = np.zeros(
            (n_blocks, size, int(LATENCY_MAX_S / LATENCY_BIN_S) + 1), dtype=np.int64
        )
        self._pending: list[tuple[int, int, int, int, int]] = []
        self.sample_t: list[float] = []
        self.busy: list[list[int]] = []
        self.kept_home: list[list[float]] = []

    def job_done(self, arrival: float, home: int, region: int, attempts: int, e2e: float) -> None:
        """Record one finished job; ``region`` < 0 means it failed."""
        t_bin = min(int(arrival / self.bin_s), len(self.jobs) - 1)
        block = min(int(arrival / self.latency_block_s), len(self.latency) - 1)
        lat_bin = min(int(e2e / LATENCY_BIN_S), self.latency.shape[2] - 1) if region >= 0 else -1
        self._pending.append((t_bin, home, region, attempts, block * 100000 + lat_bin))
        if len(self._pending) >= 65536:
            self.flush()

    def flush(self) -> None:
        """Fold buffered job records into the arrays (vectorized)."""
        if not self._pending:
            return
        rows = np.array(self._pending, dtype=np.int64)
        self._pending.clear()
        t_bin, home, region, attempts, packed = rows.T
        np.add.at(self.jobs, (t_bin, home), 1)
        np.add.at(self.attempts, (t_bin, home), attempts)
        ok = region >= 0
        np.add.at(self.served, (t_bin[ok], home[ok]), 1)
        far = ok & (region != home)
        np.add.at(self.cross, (t_bin[far], home[far]), 1)
        block, lat_bin = np.divmod(packed[ok], 100000)
        np.add.at(self.latency, (block, home[ok], lat_bin), 1)

    def sample(self, t: float, busy: Sequence[int], kept_home: Sequence[float]) -> None:
        self.sample_t.append(t)
        self.busy.append(list(busy))
        self.kept_home.append(list(kept_home))

    def busy_array(self) -> NDArray[np.float64]:
        return np.array(self.busy, dtype=np.float64).reshape(-1, len(self.regions))

    def kept_home_array(self) -> NDArray[np.float64]:
        return np.array(self.kept_home, dtype=np.float64).reshape(-1, len(self.regions))
