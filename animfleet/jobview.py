"""The public form of a job record: what ``GET /v1/jobs/{id}`` returns and webhooks carry."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from animfleet.jobs import (
    JobError,
    JobMetrics,
    JobParams,
    JobProgress,
    JobRecord,
    JobState,
    WebhookAttempt,
    public_job_id,
)


class URLSigner(Protocol):
    """What signs output URLs (an object store of the :mod:`storage` package)."""

    def presigned_url(self, key: str, expires_in: int) -> str: ...


class OutputView(BaseModel):
    url: str | None  # presigned afresh on every read; ``None`` if storage could not sign
    expires_at: float | None
    key: str
    bytes: int
    content_type: str


class JobView(BaseModel):
    """A job as web backends see it. Times are unix seconds."""

    id: str
    status: JobState
    region: str
    home_region: str
    created_at: float
    started_at: float | None
    completed_at: float | None
    attempts: int
    queue_position: int | None = None  # 0 = next to start in its region; only while queued
    estimated_start_at: float | None = None  # only while queued
    progress: JobProgress
    metrics: JobMetrics
    output: OutputView | None
    error: JobError | None
    input: JobParams
    model_version: str | None = None  # name@version that runs or ran the job
    start_deadline: float | None
    deadline: float | None
    webhook: str | None
    webhook_events_filter: list[str]
    webhook_attempts: list[WebhookAttempt]
    metadata: dict[str, Any]


def estimate_start(
    position: int,
    mean_run_s: float | None,
    live_workers: int,
    now: float,
    running_left_s: Sequence[float] = (),
) -> float | None:
    """When a job ``position`` places from the front should start. Each GPU frees up when its
    running job ends (``running_left_s``: seconds left of each; idle GPUs are free now), then
    each job ahead takes the first GPU free for ``mean_run_s``."""
    if mean_run_s is None or live_workers <= 0:
        return None
    free_at = sorted(max(0.0, left) for left in running_left_s)[:live_workers]
    free_at += [0.0] * (live_workers - len(free_at))
    heapq.heapify(free_at)
    for _ in range(position):
        heapq.heappush(free_at, heapq.heappop(free_at) + mean_run_s)
    return now + free_at[0]


def job_view(
    record: JobRecord,
    *,
    objects: URLSigner | None = None,
    presign_expiry_s: int = 3600,
    queue_position: int | None = None,
    estimated_start_at: float | None = None,
) -> JobView:
    """Render ``record``; ``objects`` signs a fresh output URL when given."""
    output = None
    if record.output is not None:
        url, expires_at = None, None
        if objects is not None:
            try:
                url = objects.presigned_url(record.output.key, presign_expiry_s)
                expires_at = time.time() + presign_expiry_s
            except Exception:  # storage briefly unreachable: the record is still worth returning
                url = None
        output = OutputView(
            url=url,
            expires_at=expires_at,
            key=record.output.key,
            bytes=record.output.bytes,
            content_type=record.output.content_type,
        )
    queued = record.status is JobState.QUEUED
    return JobView(
        id=public_job_id(record.id, record.tenant),
        status=record.status,
        region=record.region,
        home_region=record.home_region,
        created_at=record.created_at,
        started_at=record.started_at,
        completed_at=record.completed_at,
        attempts=record.attempts,
        queue_position=queue_position if queued else None,
        estimated_start_at=estimated_start_at if queued else None,
        progress=record.progress,
        metrics=record.metrics,
        output=output,
        error=record.error,
        input=record.params,
        model_version=record.params.model_version,
        start_deadline=record.start_deadline,
        deadline=record.deadline,
        webhook=record.webhook_url,
        webhook_events_filter=record.webhook_events,
        webhook_attempts=record.webhook_attempts,
        metadata=record.metadata,
    )
