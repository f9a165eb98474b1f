"""How long a worker took from start to ready, by stage: logged once and exported as a metric.

The stages happen in two processes: the main one fetches and verifies the boot versions before
Celery starts, the pool child (forked from it, so it inherits this module's clock) loads and
warms up the models. The child reports when it is ready to take jobs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.stdlib.get_logger("animfleet.worker")


@dataclass
class BootClock:
    """Seconds per boot stage, from ``started`` (the worker process's start)."""

    started: float = field(default_factory=time.monotonic)
    fetch_s: float = 0.0
    fetched_bytes: int = 0
    reused_bytes: int = 0

    def stages(self, load_s: float, warmup_s: float) -> dict[str, float]:
        """fetch, load and warm-up seconds, and ``ready``: start to now (the stages plus
        what lies between them: imports, connecting, forking the pool)."""
        return {
            "fetch": self.fetch_s,
            "load": load_s,
            "warmup": warmup_s,
            "ready": time.monotonic() - self.started,
        }

    def report(self, region: str, load_s: float, warmup_s: float, metrics: bool) -> None:
        """Log ``worker.boot`` with each stage's seconds; with ``metrics``, set
        ``animfleet_worker_boot_seconds{stage}`` too."""
        stages = self.stages(load_s, warmup_s)
        if metrics:
            from workers.metrics import WORKER_BOOT

            for stage, seconds in stages.items():
                WORKER_BOOT.labels(region, stage).set(seconds)
        fields: dict[str, Any] = {f"{stage}_s": round(s, 3) for stage, s in stages.items()}
        log.info(
            "worker.boot",
            region=region,
            fetched_bytes=self.fetched_bytes,
            reused_bytes=self.reused_bytes,
            **fields,
        )


# One per process; a forked pool child inherits the main process's, fetch time included.
CLOCK = BootClock()
