"""A batch worker's slots running whole jobs (real Redis, real store, the shipped student):
each record names its slot, and a job whose upload fails fails alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from animfleet.topology import Region
from storage import ObjectInfo, StorageError
from storage.local import LocalStore
from workers.batching.slots import Slots
from workers.model.animator import load_animator
from workers.model.runtime.serving import load_serving
from workers.runner import JobRunner
from workers.settings import WorkerSettings


class FailingFor(LocalStore):
    """A store whose uploads fail for keys containing ``marker``."""

    def __init__(self, root: Path, marker: str) -> None:
        super().__init__(root)
        self.marker = marker

    def put(self, key: str, data: bytes, content_type: str) -> ObjectInfo:
        if self.marker in key:
            raise StorageError(f"bucket refused {key}")
        return super().put(key, data, content_type)


@pytest.fixture
def slots(redis_client: redis.Redis, tmp_path: Path) -> Iterator[tuple[Slots, JobStore]]:
    settings = WorkerSettings(model_dir=SHIPPED_STUDENT_DIR, profile=False, batch=3)
    store = JobStore(redis_client)
    base = JobRunner(
        region=Region(name="r1", broker_url="redis://unused"),
        settings=settings,
        store=store,
        objects=FailingFor(tmp_path / "objects", "r1.bad"),
        animator=load_animator(settings),
        worker_name="gpu-a",
    )
    running = Slots(base, 3)
    yield running, store
    running.close()


def test_three_jobs_in_three_slots_and_a_failed_upload_fails_only_its_job(
    slots: tuple[Slots, JobStore], make_image: Callable[..., bytes]
) -> None:
    pool, store = slots
    ids = [new_job_id("r1"), "r1.bad" + new_job_id("r1")[3:], new_job_id("r1")]
    for index, job_id in enumerate(ids):
        params = JobParams(prompt="zoom in", frames=4, fps=8, width=16, height=16, seed=index)
        record = JobRecord(id=job_id, region="r1", home_region="r1", params=params)
        seed(store.redis, record, make_image(16, 16, seed=index))

    def run(job_id: str) -> None:
        with pool.take() as runner:
            runner.run(job_id)

    # However slow the host, the first step waits for a second job to reach the engine (the
    # engine thread alone takes queued jobs in), so the jobs do share U-Net calls.
    engine, step = pool.engine, pool.engine._step
    deadline = time.monotonic() + 60

    def first_step_with_company(members: list[Any]) -> None:
        while engine.steps_run == 0 and len(engine._active) + engine._pending.qsize() < 2:
            assert time.monotonic() < deadline, "a second job never reached the engine"
            time.sleep(0.001)
        step(members)

    engine._step = first_step_with_company  # type: ignore[method-assign]

    threads = [threading.Thread(target=run, args=(job_id,)) for job_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    records = [store.get(job_id) for job_id in ids]
    assert [r.status for r in records] == [JobState.SUCCEEDED, JobState.FAILED, JobState.SUCCEEDED]
    assert records[1].error is not None and records[1].error.code == "storage_error"
    assert {r.worker for r in records} == {"gpu-a/0", "gpu-a/1", "gpu-a/2"}
    steps = load_serving(SHIPPED_STUDENT_DIR).steps  # the student's served step count
    assert all(r.progress.step == r.progress.total == steps for r in records)
    assert pool.engine.largest_batch >= 2
