"""GPU time per job: a log-normal fitted to a measured median and p99."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Z99 = 2.3263478740408408  # standard normal quantile at 0.99


@dataclass(frozen=True)
class ServiceTime:
    """Seconds of GPU time per job, log-normal with the given median and p99.

    Take both from the worker benchmark of the model being served (one job on one GPU).
    """

    median_s: float = 4.0
    p99_s: float = 6.0

    def __post_init__(self) -> None:
        if not 0 < self.median_s < self.p99_s:
            raise ValueError(
                f"need 0 < median_s < p99_s, got median_s={self.median_s} p99_s={self.p99_s}"
            )

    @property
    def mu(self) -> float:
        return math.log(self.median_s)

    @property
    def sigma(self) -> float:
        return math.log(self.p99_s / self.median_s) / Z99

    @property
    def mean_s(self) -> float:
        return math.exp(self.mu + self.sigma**2 / 2)

    def sample(self, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        return rng.lognormal(self.mu, self.sigma, size)

    def cdf(self, seconds: NDArray[np.float64]) -> NDArray[np.float64]:
        """P(service <= seconds), elementwise."""
        from math import erf, sqrt

        safe = np.maximum(seconds, 1e-12)
        z = (np.log(safe) - self.mu) / (self.sigma * sqrt(2.0))
        values = 0.5 * (1.0 + np.vectorize(erf)(z))
        return np.where(seconds > 0, values, 0.0).astype(np.float64)
