"""Where a queued job stands and when it should start: its place in line (GPU queue, then the
backlog by fair share) and the time its region's GPUs need to reach it."""

from __future__ import annotations

import time

from animfleet.jobs import JobRecord, JobState
from animfleet.jobview import estimate_start
from animfleet.region.backlog import Backlog
from animfleet.region.jobstore import JobStore


def queue_eta(
    store: JobStore, record: JobRecord, live_workers: int
) -> tuple[int | None, float | None]:
    """(queue position, estimated start) of a queued job; ``(None, None)`` otherwise."""
    if record.status is not JobState.QUEUED:
        return None, None
    position = store.queue_position(record)
    if position is None:  # in the backlog: behind the GPU queue, by fair share
        ahead = Backlog(store.redis, record.region).jobs_ahead(record.id, record.tenant)
        if ahead is None:
            return None, None
        position = store.queue_depth(record.region) + ahead
    mean = store.mean_run_time(record.region)
    now = time.time()
    left = running_left(store, record.region, mean, now) if mean is not None else []
    return position, estimate_start(position, mean, live_workers, now, left)


def running_left(store: JobStore, region: str, mean_s: float, now: float) -> list[float]:
    """Seconds left of each job running in ``region``, from its steps (or time) so far."""
    left = []
    for running in store.running(region):
        step, total = running.progress.step, running.progress.total
        if total:
            left.append(mean_s * (1 - step / total))
        elif running.started_at is not None:
            left.append(max(0.0, mean_s - (now - running.started_at)))
    return left
