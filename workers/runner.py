"""One job on one GPU: input -> pipeline -> MP4 -> storage; the record advanced at each step."""

from __future__ import annotations

import io
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import redis
import structlog
from billiard.exceptions import SoftTimeLimitExceeded
from PIL import Image
from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_random_exponential

from animfleet.jobs import (
    IllegalTransition,
    JobCanceled,
    JobError,
    JobOutput,
    JobParams,
    JobRecord,
    JobState,
)
from animfleet.region.canary import VersionRuns, judge
from animfleet.region.deployments import Deployments
from animfleet.region.jobstore import JobNotFound, JobStore, expire_if_overdue
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from animfleet.versions import is_pinned, sticky_fraction
from storage import ObjectInfo, ObjectStore, StorageError, StorageUnavailable, output_key
from workers import metrics as worker_metrics
from workers.encode import EncodeError, encode_mp4
from workers.errors import WorkerError
from workers.heartbeat import Heartbeat
from workers.inputs import StoredInputError, StoredInputMissing, stored_inputs
from workers.model import Animator, ModelError
from workers.model.grey import is_grey, to_grey
from workers.model.masked import prefetch
from workers.model.pipeline import StepCallback
from workers.settings import WorkerSettings
from workers.versions import ModelShelf

log = structlog.stdlib.get_logger("animfleet.worker")
UNNAMED_MODEL = "worker@local"  # a runner built without a shelf (in-process tests)

# Failures that count against the version that ran the job (a canary that fails these is
# rolled back); bad input, cancels, deadlines and storage trouble do not.
VERSION_FAILURES = frozenset(
    {"model_error", "model_unavailable", "internal_error", "timeout", "worker_lost"}
)


class BatchDenoiser(Protocol):
    """What a batch worker's runners denoise in (``workers.batching.BatchEngine``)."""

    def animate(
        self,
        animator: Animator,
        image: bytes,
        params: JobParams,
        on_step: StepCallback | None,
        time_limit_s: float | None,
        mask: bytes | None = None,
        inputs: Mapping[str, bytes] | None = None,
    ) -> npt.NDArray[np.uint8]: ...


class JobFailed(WorkerError):
    """Ends a job as ``failed`` with a machine-readable code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class JobRunner:
    """Everything a worker process needs to run jobs; built once per process."""

    region: Region
    settings: WorkerSettings
    store: JobStore
    objects: ObjectStore
    animator: Animator
    worker_name: str
    heartbeat: Heartbeat | None = None
    # Registry versions beside ``animator`` (the worker's own model); None: only its own.
    shelf: ModelShelf | None = None
    # Batch mode: the engine this runner's jobs denoise in, and the heartbeat slot it marks.
    batch: BatchDenoiser | None = None
    slot: int = 0

    def run(self, job_id: str) -> None:
        """Run ``job_id`` to a terminal state; never raises for a job-level failure."""
        if self.heartbeat:
            self.heartbeat.busy(job_id, self.slot)
        try:
            self._run(job_id)
        finally:
            if self.heartbeat:
                self.heartbeat.busy(None, self.slot)

    def _run(self, job_id: str) -> None:
        bound = log.bind(job_id=job_id, region=self.region.name, worker=self.worker_name)
        try:
            record = self.store.get(job_id)
        except JobNotFound:
            bound.error("job.record_missing")
            return
        if record.status.terminal:  # e.g. canceled or expired while queued: never starts
            bound.info("job.already_terminal", status=record.status.value)
            return
        if self._running_elsewhere(record):
            # A second delivery of a job a live worker runs (a requeue raced the broker's own
            # redelivery): running it again would only waste a GPU.
            bound.info("job.duplicate_delivery", running_on=record.worker)
            return
        now = time.time()
        if record.start_overdue(now):
            try:
                self.store.update(job_id, lambda current: expire_if_overdue(current, now))
                bound.info("job.transition", status=JobState.EXPIRED.value)
            except IllegalTransition:
                pass
            return
        if record.attempts >= self.settings.max_deliveries:
            self._finish(
                bound,
                job_id,
                JobState.FAILED,
                error=JobError(
                    code="worker_lost",
                    message=f"a worker died {record.attempts} times running this job; giving up",
                ),
            )
            return
        started = self._start(bound, record)
        if started is None:
            return
        record = started
        bound = bound.bind(attempt=record.attempts)
        try:
            output, metrics = self._execute(record)
        except JobCanceled as stop:
            if stop.code == "deadline_exceeded":
                self._finish(
                    bound, job_id, JobState.CANCELED, JobError(code=stop.code, message=stop.message)
                )
            else:  # the record says canceled already
                bound.info("job.stopped", reason=stop.code, step=stop.message)
        except JobFailed as failure:
            self._finish(
                bound, job_id, JobState.FAILED, JobError(code=failure.code, message=failure.message)
            )
        except SoftTimeLimitExceeded:
            self._finish(
                bound,
                job_id,
                JobState.FAILED,
                JobError(
                    code="timeout", message=f"job ran past {self.settings.soft_time_limit_s}s"
                ),
            )
        except Exception as error:  # a bug: the user still gets a terminal state
            bound.exception("job.internal_error")
            self._finish(
                bound,
                job_id,
                JobState.FAILED,
                JobError(code="internal_error", message=f"{type(error).__name__}: {error}"),
            )
        else:
            self._finish(bound, job_id, JobState.SUCCEEDED, output=output, metrics=metrics)

    def _running_elsewhere(self, record: JobRecord) -> bool:
        if record.status is not JobState.RUNNING or record.worker in (None, self.worker_name):
            return False
        return WorkerRegistry(self.store.redis, self.region.name).present(str(record.worker))

    def _execute(self, record: JobRecord) -> tuple[JobOutput, dict[str, float]]:
        addons = getattr(self.animator, "addons", None)  # stand-ins and fakes have none
        if addons is not None and record.params.addons:  # loads overlap the input's download
            addons.prefetch([use.name for use in record.params.addons])
        stored = self.store.input_image(record.id)
        if stored is None:
            raise JobFailed("input_missing", "the job's input image is no longer stored")
        try:
            inputs = stored_inputs(stored, record.params)
        except StoredInputMissing as error:
            raise JobFailed("input_missing", str(error)) from None
        except StoredInputError as error:
            raise JobFailed("input_invalid", str(error)) from None
        image, mask = inputs.image, inputs.mask
        params = record.params
        check_decodes(image)
        decoded = {"mask": mask} if mask is not None else {}
        for name, data in {**decoded, **inputs.region_masks}.items():
            try:
                check_decodes(data)
            except JobFailed as failure:
                raise JobFailed("input_invalid", f"{name}: {failure.message}") from None

        def on_step(step: int, total: int) -> None:
            """Record progress; stop the job (raising) if it was canceled or ran past its
            deadline, so the GPU is free for the next job after at most one more step."""

            def progress(current: JobRecord) -> None:
                if current.status is not JobState.RUNNING:
                    raise JobCanceled(current.status.value, f"{current.status.value} at {step}")
                if current.deadline is not None and time.time() > current.deadline:
                    raise JobCanceled(
                        "deadline_exceeded", f"ran past its deadline (step {step} of {total})"
                    )
                current.progress.step, current.progress.total = step, total

            self.store.update(record.id, progress)

        try:
            animator = self.shelf.get(params.model_version)[1] if self.shelf else self.animator
        except ModelError as error:
            raise JobFailed("model_unavailable", str(error)) from error
        if mask is not None:  # its template (fitted frame, features) builds in the background
            prefetch(animator, image, mask, params)
        # Only masked jobs pass a mask, only jobs with add-ons' control images or brushed
        # regions' masks pass those: stand-in animators need not know either.
        extra: dict[str, Any] = {"mask": mask} if mask is not None else {}
        if inputs.controls or inputs.region_masks:
            extra["inputs"] = {**inputs.controls, **inputs.region_masks}
        started = time.perf_counter()
        try:
            if self.batch is None:
                frames = animator.animate(image, params, on_step, **extra)
            else:  # a thread pool has no soft time limit of its own: the engine keeps it
                limit = self.settings.soft_time_limit_s
                frames = self.batch.animate(animator, image, params, on_step, limit, **extra)
        except ModelError as error:
            raise JobFailed("model_error", str(error)) from error
        if is_grey(image):  # the model adds chroma; a grey input gets grey frames
            frames = to_grey(frames)
        inferred = time.perf_counter()
        try:
            video = encode_mp4(frames, params.fps)
        except EncodeError as error:
            raise JobFailed("encode_error", str(error)) from error
        encoded = time.perf_counter()
        key = output_key(self.region.storage.prefix, record.id)
        info = self._upload(key, video)
        uploaded = time.perf_counter()
        output = JobOutput(
            key=info.key,
            bytes=info.size,
            content_type=info.content_type,
            frames=int(frames.shape[0]),
            fps=params.fps,
            width=int(frames.shape[2]),
            height=int(frames.shape[1]),
        )
        metrics = {
            "inference_time": inferred - started,
            "encode_time": encoded - inferred,
            "upload_time": uploaded - encoded,
        }
        return output, metrics

    def _upload(self, key: str, video: bytes) -> ObjectInfo:
        retrying = Retrying(
            retry=retry_if_exception_type(StorageUnavailable),
            wait=wait_random_exponential(multiplier=0.5, max=10),
            stop=stop_before_delay(self.settings.upload_retry_s),
            before_sleep=lambda _: worker_metrics.UPLOAD_RETRIES.labels(self.region.name).inc(),
            reraise=True,
        )
        try:
            info: ObjectInfo = retrying(self.objects.put, key, video, "video/mp4")
            return info
        except StorageUnavailable as error:
            raise JobFailed("storage_unavailable", f"upload kept failing: {error}") from error
        except StorageError as error:
            raise JobFailed("storage_error", str(error)) from error

    def _start(self, bound: structlog.stdlib.BoundLogger, read: JobRecord) -> JobRecord | None:
        """Mark the job running, in one transaction with the checks that allow it: a job
        canceled or expired since it was read is not started (and that is no error).
        The record names the version that runs it (see :meth:`_version_now`)."""
        job_id, version = read.id, self._version_now(bound, read)

        def change(record: JobRecord) -> None:
            if record.status.terminal:
                raise IllegalTransition(f"job {job_id} is {record.status.value}")
            record.transition(JobState.RUNNING)
            record.worker = self.worker_name
            record.progress.step = 0
            if version != record.params.model_version:
                record.params = record.params.model_copy(update={"model_version": version})

        try:
            record = self.store.update(job_id, change)
        except IllegalTransition as refused:
            bound.info("job.not_started", reason=str(refused))
            return None
        bound.info("job.transition", status=JobState.RUNNING.value, attempts=record.attempts)
        worker_metrics.job_started(record)
        return record

    def _version_now(self, bound: structlog.stdlib.BoundLogger, record: JobRecord) -> str:
        """The version to run: the one picked at submit, unless its deployment has rolled it
        back since (then the deployment picks again); the worker's own model when none."""
        picked, model = record.params.model_version, record.params.model
        if picked is None:
            return self.shelf.own_label if self.shelf else UNNAMED_MODEL
        if model is None or is_pinned(model):
            return picked
        deployment = Deployments(self.store.redis, self.region.name).get(model)
        if deployment is None or deployment.versions.get(picked, 0.0) > 0:
            return picked
        repicked = deployment.pick(sticky_fraction(record.id))
        if repicked != picked:
            bound.info("job.version_repicked", deployment=model, was=picked, now=repicked)
        return repicked

    def _finish(
        self,
        bound: structlog.stdlib.BoundLogger,
        job_id: str,
        state: JobState,
        error: JobError | None = None,
        output: JobOutput | None = None,
        metrics: dict[str, float] | None = None,
    ) -> None:
        def change(record: JobRecord) -> None:
            record.transition(state)
            record.error, record.output = error, output
            for name, value in (metrics or {}).items():
                setattr(record.metrics, name, value)

        try:
            record = self.store.update(job_id, change)
        except IllegalTransition as refused:  # e.g. canceled while it ran: that state stands
            bound.warning("job.finish_refused", wanted=state.value, reason=str(refused))
            return
        worker_metrics.job_finished(record)
        self._observe_version(bound, record)
        bound.info(
            "job.transition",
            status=state.value,
            attempts=record.attempts,
            error_code=error.code if error else None,
            output_key=output.key if output else None,
            **record.metrics.model_dump(exclude_none=True),
        )

    def _observe_version(self, bound: structlog.stdlib.BoundLogger, record: JobRecord) -> None:
        """Count the outcome against the version that ran the job, then let its deployment
        judge its canaries (a rollback is logged and counted here, where it happened)."""
        version = record.params.model_version
        failed = record.error is not None and record.error.code in VERSION_FAILURES
        if version is None or not (record.status is JobState.SUCCEEDED or failed):
            return
        seconds = (record.completed_at or 0.0) - (record.started_at or record.completed_at or 0.0)
        worker_metrics.VERSION_OUTCOMES.labels(
            self.region.name, version, "failed" if failed else "succeeded"
        ).inc()
        try:
            VersionRuns(self.store.redis, self.region.name).record(
                version, record.id, not failed, seconds
            )
            model = record.params.model
            if model is None or is_pinned(model):
                return
            for event in judge(self.store.redis, self.region.name, model):
                worker_metrics.ROLLBACKS.labels(self.region.name, model, str(event.version)).inc()
                bound.warning(
                    "deployment.rolled_back",
                    deployment=model,
                    version=event.version,
                    reason=event.reason,
                    failed_jobs=event.failed_jobs,
                )
        except redis.RedisError as error:  # the job's own outcome is recorded already
            bound.warning("deployment.outcome_unrecorded", version=version, error=str(error))


def check_decodes(image: bytes) -> None:
    """Decode the stored input fully before any GPU time is spent on it: a file that passed the
    dispatcher's header check but cannot be decoded fails as ``input_invalid``, as it would
    have at the edge, not as a model or internal error."""
    try:
        with Image.open(io.BytesIO(image)) as decoded:
            decoded.load()
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError) as error:
        raise JobFailed("input_invalid", f"the input image cannot be decoded: {error}") from None
