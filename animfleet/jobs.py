"""The job record: what a user sees of a job, and the only legal ways its state changes."""

from __future__ import annotations

import hashlib
import secrets
import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from animfleet.addons import AddonUse
from animfleet.brush import RegionUse
from animfleet.errors import AnimfleetError, PermanentError
from animfleet.families import Adjustment
from animfleet_api.bounds import DEFAULT_PRIORITY as DEFAULT_PRIORITY
from animfleet_api.bounds import DEFAULT_TENANT as DEFAULT_TENANT
from animfleet_api.bounds import MAX_PRIORITY as MAX_PRIORITY

JOB_ID_TOKEN_BYTES = 16


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    EXPIRED = "expired"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED, JobState.EXPIRED}
)

# Every legal transition, in one place. RUNNING -> RUNNING is a redelivery after a worker died.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset(
        {JobState.RUNNING, JobState.FAILED, JobState.CANCELED, JobState.EXPIRED}
    ),
    # running -> queued: its worker vanished and a sweeper put the job back on the queue.
    JobState.RUNNING: frozenset(
        {JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELED: frozenset(),
    JobState.EXPIRED: frozenset(),
}


class IllegalTransition(PermanentError, RuntimeError):
    """A state change that the job lifecycle does not allow (e.g. succeeded -> running)."""


class JobCanceled(AnimfleetError):
    """Raised from a running job's step callback to stop it: canceled or past its deadline.

    Deliberately not a ``RuntimeError``/``ValueError``: the pipeline turns those into model errors.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Webhook event names users filter on (``webhook_events_filter``), as Replicate's API spells them.
WEBHOOK_EVENTS = ("start", "progress", "completed")


def new_job_id(region: str) -> str:
    """An unguessable id that names the region holding the record: ``<region>.<128-bit token>``."""
    return f"{region}.{secrets.token_hex(JOB_ID_TOKEN_BYTES)}"


def region_of(job_id: str) -> str:
    """The region whose store holds the record of ``job_id``."""
    region, sep, token = job_id.rpartition(".")
    if not sep or not region or not token:
        raise ValueError(f"job id {job_id!r} is not of the form <region>.<token>")
    return region


def scoped_job_id(client_id: str, tenant: str) -> str:
    """The stored id of ``client_id`` as ``tenant`` chose it through an API key: each tenant's
    ids are its own (two tenants' ``render-1`` are two jobs). The scope is a digest of the
    tenant, as tenant names may hold dots (which mark ``<region>.<token>`` ids)."""
    return f"{client_id}~{hashlib.sha256(tenant.encode()).hexdigest()[:20]}"


def public_job_id(job_id: str, tenant: str) -> str:
    """The id ``tenant`` knows its job ``job_id`` by: a client-chosen id without its scope."""
    client_id, scoped, _ = job_id.rpartition("~")
    if scoped and scoped_job_id(client_id, tenant) == job_id:
        return client_id
    return job_id


class JobError(BaseModel):
    code: str
    message: str


class JobOutput(BaseModel):
    key: str
    bytes: int
    content_type: str = "video/mp4"
    frames: int
    fps: int
    width: int
    height: int


class JobMetrics(BaseModel):
    """Seconds; ``None`` until the phase happened."""

    queue_time: float | None = None
    inference_time: float | None = None
    encode_time: float | None = None
    upload_time: float | None = None
    total_time: float | None = None


class JobProgress(BaseModel):
    step: int = 0
    total: int = 0


class JobParams(BaseModel):
    """What the worker needs to run the job; validated by the dispatcher before it is queued."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    frames: int
    fps: int
    width: int
    height: int
    seed: int
    steps: int | None = None
    variant: str | None = None
    # The deployment (or pinned name@version) that chose the model; None: the worker's own.
    model: str | None = None
    # The version that runs (or ran) the job: chosen at submit, or the worker's own model's.
    model_version: str | None = None
    # Motion add-ons the job runs with (none: exactly the base model); checked at submit.
    addons: tuple[AddonUse, ...] = ()
    # sha256 of the mask PNG stored beside the input image (white animates); None: no mask.
    mask: str | None = None
    # sha256 of the input image's bytes as submitted, computed once at submit: what a worker's
    # template cache keys the image by. None: a record from before it was kept.
    image_sha256: str | None = None
    # Motion-brush regions (each mask by its hash, stored beside the image) and whether the
    # clip loops seamlessly (:mod:`animfleet.brush`); none and False: as before brushes.
    regions: tuple[RegionUse, ...] = ()
    loop: bool = False
    # What a generative family reads besides the prompt: what to steer away from, and the
    # guidance scale (None: the model's default).
    negative_prompt: str | None = None
    guidance: float | None = None
    # The model's family (its pipeline class) and what its rules changed, asked vs delivered
    # (:mod:`animfleet.families`); None and none: the built-in model, nothing changed.
    family: str | None = None
    adjustments: tuple[Adjustment, ...] = ()


class WebhookAttempt(BaseModel):
    """One attempt to deliver one webhook event, as recorded on the job."""

    webhook_id: str
    type: str
    attempt: int
    at: float
    status_code: int | None = None
    latency_ms: float | None = None
    outcome: str  # delivered | retry | stopped (410) | gave_up | refused (URL not allowed)
    error: str | None = None


MAX_RECORDED_ATTEMPTS = 100


class JobRecord(BaseModel):
    """The record kept in the region that runs the job; also the body of webhook events."""

    id: str
    status: JobState = JobState.QUEUED
    region: str
    home_region: str
    params: JobParams
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    completed_at: float | None = None
    attempts: int = 0
    worker: str | None = None  # the worker slot of the run that holds the job (or held it last)
    # That run's fencing token (:mod:`animfleet.region.runs`): its writes count only while the
    # record still names it. None while queued (or started by a worker that predates tokens).
    run: str | None = None
    progress: JobProgress = Field(default_factory=JobProgress)
    metrics: JobMetrics = Field(default_factory=JobMetrics)
    output: JobOutput | None = None
    error: JobError | None = None
    webhook_url: str | None = None
    webhook_events: list[str] = Field(default_factory=lambda: list(WEBHOOK_EVENTS))
    webhook_disabled: bool = False  # the receiver answered 410 Gone: no more events
    webhook_attempts: list[WebhookAttempt] = Field(default_factory=list)
    webhook_progress_at: float | None = None  # when the last progress event was emitted
    start_deadline: float | None = None  # unix time; not started by then -> expired
    deadline: float | None = None  # unix time; still running then -> canceled
    metadata: dict[str, Any] = Field(default_factory=dict)
    tenant: str = DEFAULT_TENANT
    priority: int = DEFAULT_PRIORITY  # 0-9, higher first within its tenant

    def start_overdue(self, now: float) -> bool:
        """Queued past its start deadline (or its total deadline): it must not start. A job
        requeued after its worker vanished did start in time: only its deadline counts."""
        start_by = self.start_deadline if self.attempts == 0 else None
        limits = [t for t in (start_by, self.deadline) if t is not None]
        return self.status is JobState.QUEUED and bool(limits) and now >= min(limits)

    def end(self, state: JobState, code: str, message: str) -> None:
        """Move to a terminal ``state`` with an error code (canceled, expired, failed)."""
        self.transition(state)
        self.error = JobError(code=code, message=message)

    def record_attempt(self, attempt: WebhookAttempt) -> None:
        self.webhook_attempts = [*self.webhook_attempts, attempt][-MAX_RECORDED_ATTEMPTS:]

    def transition(self, new: JobState) -> None:
        """Move to ``new`` or raise :class:`IllegalTransition`; stamps times on the way."""
        if new not in TRANSITIONS[self.status]:
            raise IllegalTransition(f"job {self.id}: {self.status.value} -> {new.value}")
        now = time.time()
        if new is JobState.RUNNING:
            self.started_at = now
            self.attempts += 1
            self.metrics.queue_time = now - self.created_at
        elif new.terminal:
            self.completed_at = now
            self.metrics.total_time = now - self.created_at
        self.status = new
