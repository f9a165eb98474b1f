"""The job lifecycle on a real Redis and a real store; the model is swapped per failure mode."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from PIL import Image

from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.topology import Region
from storage.local import LocalStore
from workers.model import ModelError
from workers.runner import JobRunner
from workers.settings import WorkerSettings

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (90, 120, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


IMAGE = _png()  # the runner decodes the stored input before it spends GPU time


class FakeModel:
    """Stands in for the Animator so each failure mode is one line."""

    def __init__(self, behaviour: Callable[[], Any]) -> None:
        self.behaviour = behaviour

    def animate(self, image: bytes, params: JobParams, on_step: Any = None) -> Any:
        if on_step:
            on_step(1, 1)
        return self.behaviour()


def good_frames() -> np.ndarray:
    return np.zeros((4, 32, 32, 3), np.uint8)


def raise_model_error() -> np.ndarray:
    raise ModelError("CUDA out of memory")


def odd_sized_frames() -> np.ndarray:
    return np.zeros((4, 31, 32, 3), np.uint8)


def explode() -> np.ndarray:
    raise KeyError("unexpected")


@pytest.fixture
def run_job(
    redis_client: redis.Redis, tmp_path: Path
) -> Callable[..., tuple[JobRecord, LocalStore]]:
    def run(behaviour: Callable[[], Any], attempts: int = 0) -> tuple[JobRecord, LocalStore]:
        store, objects = JobStore(redis_client), LocalStore(tmp_path / "objects")
        record = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)
        record.attempts = attempts
        seed(store.redis, record, IMAGE)
        runner = JobRunner(
            region=Region(name="r1", broker_url="redis://unused"),
            settings=WorkerSettings(max_deliveries=3),
            store=store,
            objects=objects,
            animator=FakeModel(behaviour),  # type: ignore[arg-type]
            worker_name="w1",
        )
        runner.run(record.id)
        return store.get(record.id), objects

    return run


def test_success_uploads_one_mp4_and_records_metrics(run_job: Any) -> None:
    record, objects = run_job(good_frames)
    assert record.status is JobState.SUCCEEDED and record.attempts == 1
    # One object per run: the key names the run that wrote it (the record's fencing token).
    assert record.output.key == f"outputs/{record.id}/{record.run}.mp4"
    assert record.output.frames == 4
    assert objects.list_keys("") == [record.output.key]
    assert record.metrics.inference_time is not None and record.metrics.upload_time is not None
    assert record.progress.step == 1 and record.worker == "w1"


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [
        (raise_model_error, "model_error"),
        (odd_sized_frames, "encode_error"),
        (explode, "internal_error"),
    ],
)
def test_failures_end_failed_with_a_code_and_no_output(
    run_job: Any, behaviour: Any, code: str
) -> None:
    record, objects = run_job(behaviour)
    assert record.status is JobState.FAILED and record.error.code == code
    assert record.output is None and objects.list_keys("") == []


def test_job_whose_worker_died_too_often_is_failed_not_run(run_job: Any) -> None:
    record, objects = run_job(good_frames, attempts=3)
    assert record.status is JobState.FAILED and record.error.code == "worker_lost"
    assert objects.list_keys("") == []


class SteppingModel:
    """Reports ``total`` denoising steps; ``after_first`` runs between the first two."""

    def __init__(self, total: int, after_first: Callable[[], None]) -> None:
        self.total, self.after_first, self.steps_run = total, after_first, 0

    def animate(self, image: bytes, params: JobParams, on_step: Any = None) -> np.ndarray:
        for step in range(1, self.total + 1):
            self.steps_run = step
            on_step(step, self.total)
            if step == 1:
                self.after_first()
        return good_frames()


def run_stepping(
    redis_client: redis.Redis, tmp_path: Path, record: JobRecord, after_first: Callable[..., None]
) -> tuple[JobRecord, SteppingModel]:
    store = JobStore(redis_client)
    seed(store.redis, record, IMAGE)
    model = SteppingModel(10, lambda: after_first(store, record.id))
    runner = JobRunner(
        region=Region(name="r1", broker_url="redis://unused"),
        settings=WorkerSettings(),
        store=store,
        objects=LocalStore(tmp_path / "objects"),
        animator=model,  # type: ignore[arg-type]
        worker_name="w1",
    )
    runner.run(record.id)
    return store.get(record.id), model


def test_a_cancel_stops_the_job_at_the_next_step(redis_client: redis.Redis, tmp_path: Path) -> None:
    record = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)

    def cancel(store: JobStore, job_id: str) -> None:
        store.update(job_id, lambda r: r.end(JobState.CANCELED, "canceled", "by request"))

    final, model = run_stepping(redis_client, tmp_path, record, cancel)
    assert model.steps_run == 2 and final.status is JobState.CANCELED
    assert final.error is not None and final.error.code == "canceled" and final.output is None


def test_a_job_past_its_deadline_is_stopped(redis_client: redis.Redis, tmp_path: Path) -> None:
    record = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)

    def deadline_passes(store: JobStore, job_id: str) -> None:
        store.update(job_id, lambda r: setattr(r, "deadline", time.time() - 1))

    final, model = run_stepping(redis_client, tmp_path, record, deadline_passes)
    assert model.steps_run == 2 and final.status is JobState.CANCELED
    assert final.error is not None and final.error.code == "deadline_exceeded"


def test_a_job_past_its_start_deadline_is_expired_not_run(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    record = JobRecord(
        id=new_job_id("r1"),
        region="r1",
        home_region="r1",
        params=PARAMS,
        start_deadline=time.time() - 1,
    )
    final, model = run_stepping(redis_client, tmp_path, record, lambda *_: None)
    assert model.steps_run == 0 and final.status is JobState.EXPIRED and final.attempts == 0


def test_a_job_canceled_between_its_read_and_its_start_is_not_started(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    class CancelAfterRead(JobStore):
        """A cancel lands right after the worker read the queued record."""

        def get(self, job_id: str) -> JobRecord:
            record = super().get(job_id)
            if record.status is JobState.QUEUED:
                self.update(job_id, lambda r: r.end(JobState.CANCELED, "canceled", "by request"))
            return record

    store = CancelAfterRead(redis_client)
    record = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)
    seed(store.redis, record, IMAGE)
    model = SteppingModel(2, lambda: None)
    runner = JobRunner(
        region=Region(name="r1", broker_url="redis://unused"),
        settings=WorkerSettings(),
        store=store,
        objects=LocalStore(tmp_path / "objects"),
        animator=model,  # type: ignore[arg-type]
        worker_name="w1",
    )
    runner.run(record.id)  # no IllegalTransition escapes: the task does not fail
    final = JobStore(redis_client).get(record.id)
    assert final.status is JobState.CANCELED and final.attempts == 0
    assert model.steps_run == 0
