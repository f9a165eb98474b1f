"""The SDK's view of the HTTP API's bodies: what ``/openapi.json`` describes (a test checks
each model's fields against the document). Unknown fields are kept, so a newer gateway does not
break an older SDK."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["queued", "running", "succeeded", "failed", "canceled", "expired"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "canceled", "expired"})


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)


class Progress(_Body):
    step: int = 0
    total: int = 0


class Output(_Body):
    url: str | None
    expires_at: float | None
    key: str
    bytes: int
    content_type: str


class JobError(_Body):
    code: str
    message: str


class Metrics(_Body):
    queue_time: float | None = None
    inference_time: float | None = None
    encode_time: float | None = None
    upload_time: float | None = None
    total_time: float | None = None


class Job(_Body):
    id: str
    status: Status
    region: str
    home_region: str
    created_at: float
    started_at: float | None = None
    completed_at: float | None = None
    attempts: int = 0
    queue_position: int | None = None
    estimated_start_at: float | None = None
    progress: Progress = Field(default_factory=Progress)
    metrics: Metrics = Field(default_factory=Metrics)
    output: Output | None = None
    error: JobError | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    model_version: str | None = None  # name@version that runs or ran the job
    start_deadline: float | None = None
    deadline: float | None = None
    webhook: str | None = None
    webhook_events_filter: list[str] = Field(default_factory=list)
    webhook_attempts: list[dict[str, Any]] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


class ErrorBody(_Body):
    code: str
    message: str
    field: str | None = None


class BatchResult(_Body):
    status: int
    job: Job | None = None
    error: ErrorBody | None = None


class JobPage(_Body):
    jobs: list[Job]
    next_cursor: str | None = None


class StoredUpload(_Body):
    """An uploaded image: ``key`` is usable as a job's ``image``, ``mask`` or an add-on's
    ``image``, by the tenant that uploaded it only."""

    key: str
    content_type: str
    bytes: int


class PresignedUpload(_Body):
    key: str
    url: str
    fields: dict[str, str]
    max_bytes: int
    expires_at: float


class LogEntry(_Body):
    region: str
    seq: int
    timestamp: str | None = None
    level: str | None = None
    event: str
    fields: dict[str, Any] = Field(default_factory=dict)


class JobLog(_Body):
    job_id: str
    lines: list[LogEntry]


class DeletedJob(_Body):
    id: str
    status: str
    deleted_at: float
    objects_deleted: int


class DayUsage(_Body):
    day: str
    jobs: dict[str, int] = Field(default_factory=dict)
    gpu_seconds: float = 0.0
    frame_pixels: int = 0
    output_bytes: int = 0
    deleted: int = 0
    retention_deleted: int = 0


class Usage(_Body):
    model_config = ConfigDict(extra="allow", defer_build=True, populate_by_name=True)

    tenant: str
    from_day: str = Field(alias="from")
    to_day: str = Field(alias="to")
    days: list[DayUsage]
    total: DayUsage


class Event(BaseModel):
    """One Server-Sent Event of ``GET /v1/jobs/{id}/events``."""

    id: str
    event: str  # queued | started | progress | succeeded | failed | canceled | expired
    data: dict[str, Any]

    @property
    def terminal(self) -> bool:
        return self.event in TERMINAL

    @property
    def job(self) -> Job | None:
        """The job, on the terminal event."""
        return Job.model_validate(self.data) if self.terminal else None
