"""One job on one GPU: input -> pipeline -> MP4 -> storage; the record advanced at each step.

Each run of a job holds a lease with a fencing token (:mod:`animfleet.region.runs`): the run
starts in one transaction that takes the lease, and every later write (progress, output,
finish) counts only while the record still names the run. A delivery of a job whose run is
alive raises :class:`LeaseHeld` (the task defers it); a run whose writes are refused stops,
logs ``job.fenced`` and removes the output object it uploaded.
"""

from __future__ import annotations

import io
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
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
from animfleet.region.jobstore import JobNotFound, JobStore, expire_if_overdue
from animfleet.region.runs import RUN_LEASE_TTL_S, Run, RunFenced, RunLeases
from animfleet.topology import Region
from storage import ObjectInfo, ObjectStore, StorageError, StorageUnavailable, output_key
from workers import metrics as worker_metrics
from workers.encode import EncodeError, encode_mp4
from workers.errors import WorkerError
from workers.heartbeat import Heartbeat
from workers.inputs import StoredInputError, StoredInputMissing, stored_inputs
from workers.model import Animator, ModelError
from workers.model.imaging.grey import is_grey, to_grey
from workers.model.pipelines.animation import StepCallback
from workers.model.pipelines.masked import prefetch
from workers.outcomes import observe_outcome, version_to_run
from workers.served_versions import ModelShelf
from workers.settings import WorkerSettings

log = structlog.stdlib.get_logger("animfleet.worker")


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

    def __post_init__(self) -> None:
        self.runs = RunLeases(self.store)

    @property
    def lease_ttl_s(self) -> float:
        """How long the run's lease lasts unrenewed: its heartbeat's TTL, which renews it."""
        return self.heartbeat.ttl_s if self.heartbeat else RUN_LEASE_TTL_S

    def run(self, job_id: str) -> None:
        """Run ``job_id`` to a terminal state; never raises for a job-level failure.

        Raises :class:`LeaseHeld` if another run of the job is alive: defer the delivery."""
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
        now = time.time()
        if record.start_overdue(now):
            try:
                self.store.update(job_id, lambda current: expire_if_overdue(current, now))
                bound.info("job.transition", status=JobState.EXPIRED.value)
            except IllegalTransition:
                pass
            return
        started = self._start(bound, record)  # LeaseHeld: another run is alive
        if started is None:
            return
        record, run = started
        if self.heartbeat:  # the run's lease lives as long as its slot's heartbeat
            self.heartbeat.hold(run, self.slot)
        bound = bound.bind(attempt=record.attempts, run=run.token)
        try:
            output, metrics = self._execute(record, run)
        except RunFenced as fenced:
            self._fenced(bound, fenced, None)
        except JobCanceled as stop:
            if stop.code == "deadline_exceeded":
                self._finish(
                    bound, run, JobState.CANCELED, JobError(code=stop.code, message=stop.message)
                )
            else:  # the record says canceled already
                bound.info("job.stopped", reason=stop.code, step=stop.message)
        except JobFailed as failure:
            self._finish(
                bound, run, JobState.FAILED, JobError(code=failure.code, message=failure.message)
            )
        except SoftTimeLimitExceeded:
            self._finish(
                bound,
                run,
                JobState.FAILED,
                JobError(
                    code="timeout", message=f"job ran past {self.settings.soft_time_limit_s}s"
                ),
            )
        except Exception as error:  # a bug: the user still gets a terminal state
            bound.exception("job.internal_error")
            self._finish(
                bound,
                run,
                JobState.FAILED,
                JobError(code="internal_error", message=f"{type(error).__name__}: {error}"),
            )
        else:
            self._finish(bound, run, JobState.SUCCEEDED, output=output, metrics=metrics)

    def _execute(self, record: JobRecord, run: Run) -> tuple[JobOutput, dict[str, float]]:
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
        if params.image_sha256 is None:  # else the stored bytes are the ones checked at submit
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

            self.runs.write(run, progress, self.lease_ttl_s)  # RunFenced stops the run

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
        key = output_key(self.region.storage.prefix, record.id, run.token)
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

    def _start(
        self, bound: structlog.stdlib.BoundLogger, read: JobRecord
    ) -> tuple[JobRecord, Run] | None:
        """Start a run of the job and take its lease, in one transaction with the checks that
        allow it: a job canceled or expired since it was read is not started (and that is no
        error); a job whose workers died ``max_deliveries`` times fails ``worker_lost``; a job
        whose run is alive raises :class:`LeaseHeld`. The record names the version that runs
        it (see :func:`version_to_run`)."""
        version = version_to_run(self.store.redis, self.region.name, self.shelf, bound, read)

        def prepare(record: JobRecord) -> None:
            if record.attempts >= self.settings.max_deliveries:
                message = f"a worker died {record.attempts} times running this job; giving up"
                record.end(JobState.FAILED, "worker_lost", message)
            elif version != record.params.model_version:
                record.params = record.params.model_copy(update={"model_version": version})

        try:
            record, run = self.runs.start(read.id, self.worker_name, self.lease_ttl_s, prepare)
        except IllegalTransition as refused:
            bound.info("job.not_started", reason=str(refused))
            return None
        if run is None:  # it gave up on the job instead
            self._finished(bound, record)
            return None
        bound.info("job.transition", status=JobState.RUNNING.value, attempts=record.attempts)
        worker_metrics.job_started(record)
        return record, run

    def _finish(
        self,
        bound: structlog.stdlib.BoundLogger,
        run: Run,
        state: JobState,
        error: JobError | None = None,
        output: JobOutput | None = None,
        metrics: dict[str, float] | None = None,
    ) -> None:
        def change(record: JobRecord) -> None:
            if record.status is state and (record.error, record.output) == (error, output):
                return  # this very finish committed and its reply was lost: the retry keeps it
            record.transition(state)
            record.error, record.output = error, output
            for name, value in (metrics or {}).items():
                setattr(record.metrics, name, value)

        try:
            record = self.runs.write(run, change, self.lease_ttl_s)
        except RunFenced as fenced:
            self._fenced(bound, fenced, output)
            return
        except IllegalTransition as refused:  # e.g. canceled while it ran: that state stands
            bound.warning("job.finish_refused", wanted=state.value, reason=str(refused))
            self._discard(bound, run.job_id, output)
            return
        self._finished(bound, record)

    def _finished(self, bound: structlog.stdlib.BoundLogger, record: JobRecord) -> None:
        worker_metrics.job_finished(record)
        observe_outcome(self.store.redis, self.region.name, bound, record)
        bound.info(
            "job.transition",
            status=record.status.value,
            attempts=record.attempts,
            error_code=record.error.code if record.error else None,
            output_key=record.output.key if record.output else None,
            **record.metrics.model_dump(exclude_none=True),
        )

    def _fenced(
        self, bound: structlog.stdlib.BoundLogger, fenced: RunFenced, output: JobOutput | None
    ) -> None:
        """This run lost the job (another run took it over, or the sweeper requeued it): stop,
        and leave no output behind but the one the record points to."""
        bound.warning("job.fenced", now_run=fenced.holder)
        self._discard(bound, fenced.run.job_id, output)

    def _discard(
        self, bound: structlog.stdlib.BoundLogger, job_id: str, output: JobOutput | None
    ) -> None:
        """Delete this run's uploaded ``output`` unless the record points to it."""
        if output is None:
            return
        try:
            current = self.store.get(job_id).output
        except JobNotFound:
            current = None
        if current is not None and current.key == output.key:
            return
        try:
            self.objects.delete(output.key)
        except StorageError as error:  # the sweeper's reconcile deletes it later
            bound.warning("output.discard_failed", key=output.key, error=str(error))
            return
        bound.info("output.discarded", key=output.key)


def check_decodes(image: bytes) -> None:
    """Decode the stored input fully before any GPU time is spent on it: a file that passed the
    dispatcher's header check but cannot be decoded fails as ``input_invalid``, as it would
    have at the edge, not as a model or internal error."""
    try:
        with Image.open(io.BytesIO(image)) as decoded:
            decoded.load()
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError) as error:
        raise JobFailed("input_invalid", f"the input image cannot be decoded: {error}") from None
