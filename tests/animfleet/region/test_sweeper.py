"""The sweeper against a real Redis and a real (local) object store: lost workers, jobs that
would wait forever, finished records leaving Redis, outputs nothing points to."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from animfleet.jobs import JobOutput, JobParams, JobRecord, JobState
from animfleet.region.admission import AdmissionOutcome, AdmissionScript, seed
from animfleet.region.affinity import DirectQueues
from animfleet.region.archive import RecordArchive
from animfleet.region.backlog import Backlog
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.keys import JOB_KEY, WEBHOOK_JOB_KEY
from animfleet.region.outbox import load_delivery
from animfleet.region.sweeper import Sweeper, SweepResult, SweepSettings
from animfleet.region.workers import WorkerRegistry
from animfleet.settings import load
from animfleet.topology import Region
from storage.base import StorageUnavailable
from storage.local import LocalStore

PARAMS = JobParams(prompt="pan left", frames=4, fps=8, width=32, height=32, seed=1)


def settings(**values: Any) -> SweepSettings:
    # A 1 ms heartbeat TTL: the test server has been up long enough to trust lapses.
    return load(SweepSettings, {}, **{"heartbeat_ttl_s": 0.001, **values})


@pytest.fixture
def store(redis_client: redis.Redis) -> JobStore:
    return JobStore(redis_client)


@pytest.fixture
def region(store_region: Callable[[str], Region]) -> Region:
    # The message builder talks to the broker: the test's Redis, database 15.
    return store_region("sw")


@pytest.fixture
def objects(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "bucket")


def running_job(store: JobStore, job_id: str, worker: str, **fields: Any) -> JobRecord:
    seed(
        store.redis,
        JobRecord(id=job_id, region="sw", home_region="sw", params=PARAMS, **fields),
        b"x",
    )

    def start(record: JobRecord) -> None:
        record.transition(JobState.RUNNING)
        record.worker = worker

    return store.update(job_id, start)


def test_a_running_job_whose_worker_is_gone_is_requeued_with_its_message(
    store: JobStore, redis_client: redis.Redis, region: Region, broker_client: redis.Redis
) -> None:
    running_job(store, "sw.lost", "gone-worker")
    running_job(store, "sw.fine", "live-worker")
    WorkerRegistry(redis_client, "sw").beat("live-worker", {}, ttl_s=30, busy=True)

    result = Sweeper(region, store, settings()).sweep()

    assert result.requeued == ["sw.lost"]
    lost = store.get("sw.lost")
    assert lost.status is JobState.QUEUED and lost.worker is None and lost.attempts == 1
    assert store.queue_position(lost) == 0
    (message,) = broker_client.lrange(region.queue, 0, -1)
    assert b"sw.lost" in message
    assert store.get("sw.fine").status is JobState.RUNNING  # its worker is alive: untouched
    assert not Sweeper(region, store, settings()).sweep().requeued  # nothing twice


def test_past_its_deadline_or_its_deliveries_it_ends_instead(
    store: JobStore, region: Region, broker_client: redis.Redis
) -> None:
    running_job(store, "sw.late", "gone", deadline=time.time() - 1)
    running_job(store, "sw.poison", "gone")
    store.update("sw.poison", lambda record: setattr(record, "attempts", 3))

    result = Sweeper(region, store, settings(max_deliveries=3)).sweep()

    assert result.ended == {"sw.late": "canceled", "sw.poison": "failed"}
    late, poison = store.get("sw.late"), store.get("sw.poison")
    assert late.error is not None and late.error.code == "deadline_exceeded"
    assert poison.error is not None and poison.error.code == "worker_lost"
    assert broker_client.llen(region.queue) == 0


def test_jobs_placed_on_a_worker_that_left_move_to_the_shared_queue(
    store: JobStore, redis_client: redis.Redis, region: Region, broker_client: redis.Redis
) -> None:
    direct = DirectQueues(redis_client, region)
    for worker in ("left", "here"):
        direct.register(worker)
        broker_client.lpush(direct.queue(worker), f"message for {worker}")
    WorkerRegistry(redis_client, "sw").beat("here", {}, ttl_s=30, busy=True)

    assert Sweeper(region, store, settings()).sweep().rescued == 1

    assert broker_client.lrange(region.queue, 0, -1) == [b"message for left"]
    assert broker_client.llen(direct.queue("here")) == 1  # its worker is live: untouched


def test_one_copy_sweeps_at_a_time(store: JobStore, region: Region) -> None:
    running_job(store, "sw.once", "gone")
    first, second = Sweeper(region, store, settings()), Sweeper(region, store, settings())
    first.sweep()  # holds the lease
    running_job(store, "sw.twice", "gone")
    assert not second.sweep().requeued
    assert first.sweep().requeued == ["sw.twice"]


def test_queued_jobs_wait_neither_forever_nor_in_a_region_without_workers(
    store: JobStore, region: Region
) -> None:
    old = JobRecord(id="sw.old", region="sw", home_region="sw", params=PARAMS)
    old.created_at = time.time() - 7200
    seed(store.redis, old, b"x")
    seed(store.redis, JobRecord(id="sw.new", region="sw", home_region="sw", params=PARAMS), b"x")
    sweeper = Sweeper(region, store, settings(max_queued_s=3600, orphan_after_s=1))
    now = time.time()
    assert sweeper.sweep(now).ended == {"sw.old": "expired"}  # older than an hour
    assert sweeper.sweep(now + 2).ended == {"sw.new": "expired"}  # no worker for 2 s
    new = store.get("sw.new")
    assert new.error is not None and new.error.code == "no_capacity"


def test_backlog_jobs_of_a_region_without_workers_end_no_capacity_too(
    store: JobStore, redis_client: redis.Redis, region: Region
) -> None:
    backlog = Backlog(redis_client, "sw")
    admission = AdmissionScript(redis_client, "sw")
    for job_id in ("sw.b1", "sw.b2"):
        job = JobRecord(
            id=job_id, region="sw", home_region="sw", params=PARAMS, tenant="t",
            webhook_url="https://hooks.example.com/animfleet",
        )  # fmt: skip
        answer = admission.admit(
            job,
            b"x",
            mode="backlog",
            message="m",
            queue=region.queue,
            outbox=not region.store_is_broker,
            allowance=0.0,
        )
        assert (
            answer.outcome == AdmissionOutcome.BACKLOGGED
        )  # no live worker: it waits in the backlog
    sweeper = Sweeper(region, store, settings(orphan_after_s=1))
    now = time.time()
    assert sweeper.sweep(now).ended == {}  # the region has had no worker for under a second

    assert sweeper.sweep(now + 2).ended == {"sw.b1": "expired", "sw.b2": "expired"}
    for job_id in ("sw.b1", "sw.b2"):
        record = store.get(job_id)
        assert record.error is not None and record.error.code == "no_capacity"
        assert not backlog.contains(job_id)  # gone from the backlog in the same transaction
    assert backlog.depth() == 0 and redis_client.hlen(backlog.message_key) == 0
    (delivery_id,) = redis_client.lrange(WEBHOOK_JOB_KEY + "sw.b1", 0, -1)
    delivery = load_delivery(redis_client, delivery_id.decode())  # as for any terminal state
    assert delivery is not None and delivery.type == "job.completed"
    assert delivery.data["error"]["code"] == "no_capacity"


def test_finished_records_move_to_the_bucket_and_stay_readable(
    store: JobStore, objects: LocalStore, redis_client: redis.Redis, region: Region
) -> None:
    running_job(store, "sw.done", "w")
    store.update("sw.done", lambda record: record.transition(JobState.SUCCEEDED))
    sweeper = Sweeper(region, store, settings(archive_after_s=60), objects=objects)
    assert not sweeper.sweep().archived  # too recent
    assert sweeper.sweep(time.time() + 120).archived == ["sw.done"]
    assert not redis_client.exists(JOB_KEY + "sw.done")
    with pytest.raises(JobNotFound):
        store.get("sw.done")
    archived = RecordArchive(objects).get("sw.done")
    assert archived is not None and archived.status is JobState.SUCCEEDED


def test_outputs_no_record_points_to_are_deleted(
    store: JobStore, objects: LocalStore, region: Region
) -> None:
    def output(job_id: str) -> str:
        key = f"outputs/{job_id}.mp4"
        objects.put(key, b"mp4", "video/mp4")
        return key

    kept = output("sw.ok")
    running_job(store, "sw.ok", "w")

    def succeed(record: JobRecord) -> None:
        record.transition(JobState.SUCCEEDED)
        record.output = JobOutput(
            key=kept, bytes=3, content_type="video/mp4", frames=4, fps=8, width=32, height=32
        )

    store.update("sw.ok", succeed)
    uploading = output("sw.uploading")
    running_job(store, "sw.uploading", "w")
    canceled = output("sw.canceled")
    running_job(store, "sw.canceled", "w")
    store.update("sw.canceled", lambda r: r.end(JobState.CANCELED, "canceled", "by request"))
    lost = output("sw.lost-record")

    sweeper = Sweeper(region, store, settings(orphan_output_age_s=60), objects=objects)
    now = time.time()
    assert sweeper.reconcile_outputs(now=now) == []  # first seen orphaned: not yet
    assert sweeper.reconcile_outputs(now=now + 59) == []
    deleted = sweeper.reconcile_outputs(now=now + 60)

    assert sorted(deleted) == sorted([canceled, lost])
    assert sorted(objects.list_keys("outputs/")) == sorted([kept, uploading])


class ThrottledArchive(LocalStore):
    """A local store whose reads of archived records fail as a 503 throttle does."""

    def get(self, key: str) -> bytes:
        if "/records/" in f"/{key}":
            raise StorageUnavailable(f"get {key}: SlowDown")
        return super().get(key)


def test_an_unreadable_archive_deletes_no_output(
    store: JobStore, region: Region, tmp_path: Path
) -> None:
    objects = ThrottledArchive(tmp_path / "throttled")
    key = "outputs/sw.archived.mp4"
    objects.put(key, b"mp4", "video/mp4")
    record = JobRecord(id="sw.archived", region="sw", home_region="sw", params=PARAMS)
    record.transition(JobState.RUNNING)
    record.transition(JobState.SUCCEEDED)
    record.output = JobOutput(
        key=key, bytes=3, content_type="video/mp4", frames=4, fps=8, width=32, height=32
    )
    RecordArchive(objects).put(record)  # in the archive only: Redis has no record of it
    sweeper = Sweeper(region, store, settings(orphan_output_age_s=0), objects=objects)

    result = SweepResult()
    assert sweeper.reconcile_outputs(result) == []
    assert result.orphans_unreadable == [key]
    assert objects.list_keys("outputs/") == [key]
    with pytest.raises(StorageUnavailable):
        RecordArchive(objects).get("sw.archived")
    assert RecordArchive(LocalStore(tmp_path / "empty")).get("sw.none") is None
