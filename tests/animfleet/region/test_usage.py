"""Usage roll-ups: finished jobs counted once into per-tenant day objects in real storage,
deletions noted (with the job, when no pass has counted it yet)."""

from __future__ import annotations

import time
from pathlib import Path

import redis

from animfleet.jobs import JobOutput, JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.region.usage import LAG_S, UsageBook, day_of, fleet_days
from storage.local import LocalStore

PARAMS = JobParams(prompt="pan", frames=8, fps=8, width=64, height=64, seed=1)


def _ended(store: JobStore, tenant: str, state: JobState) -> JobRecord:
    record = JobRecord(id=new_job_id("us"), region="us", home_region="us", params=PARAMS)
    record.tenant = tenant
    seed(store.redis, record, b"image")

    def finish(current: JobRecord) -> None:
        current.transition(JobState.RUNNING)
        if state is JobState.SUCCEEDED:
            current.output = JobOutput(key="k", bytes=1000, frames=8, fps=8, width=64, height=32)
            current.transition(state)
        else:
            current.end(state, "x", "test")

    return store.update(record.id, finish)


def test_finished_jobs_are_rolled_up_once_per_tenant_and_day(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    store = JobStore(redis_client)
    book = UsageBook(store, "us", LocalStore(tmp_path), "p/")
    done = [_ended(store, "acme", JobState.SUCCEEDED) for _ in range(2)]
    _ended(store, "acme", JobState.FAILED)
    _ended(store, "globex", JobState.SUCCEEDED)
    # ``now`` one lag on: what ended until now is counted (the lag lets records settle).
    assert len(book.roll_up(time.time() + LAG_S)) == 4
    assert book.roll_up(time.time() + LAG_S) == []  # counted once
    today = day_of(time.time())
    (acme,) = fleet_days([book], "acme", today, today)
    assert acme.jobs == {"succeeded": 2, "failed": 1, "canceled": 0, "expired": 0}
    assert acme.frame_pixels == 2 * 8 * 64 * 32 and acme.output_bytes == 2000
    assert acme.gpu_seconds >= 0 and (tmp_path / f"p/usage/acme/{today}/us.json").is_file()

    book.note_deleted(done[0])  # already counted: only the deletion
    fresh = _ended(store, "acme", JobState.CANCELED)
    book.note_deleted(fresh, by_retention=True)  # not yet counted: counted with it
    store.erase(fresh.id, "us")
    assert book.roll_up(time.time() + LAG_S) == []  # the erased job: counted by its note
    (acme,) = fleet_days([book], "acme", today, today)
    assert acme.deleted == 1 and acme.retention_deleted == 1 and acme.jobs["canceled"] == 1
    assert fleet_days([book], "acme", "2000-01-01", "2000-01-02") == []
