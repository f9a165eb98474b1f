import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobNotFound, JobStore

PARAMS = JobParams(prompt="zoom in", frames=8, fps=8, width=64, height=64, seed=1)


def test_create_get_update_and_input_lifetime(redis_client: redis.Redis) -> None:
    store = JobStore(redis_client)
    job = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)
    seed(store.redis, job, b"image-bytes")
    assert store.get(job.id).status is JobState.QUEUED
    assert store.input_image(job.id) == b"image-bytes"
    store.update(job.id, lambda r: r.transition(JobState.RUNNING))
    assert store.input_image(job.id) == b"image-bytes"
    updated = store.update(job.id, lambda r: r.transition(JobState.SUCCEEDED))
    assert updated.status is JobState.SUCCEEDED and store.get(job.id).attempts == 1
    assert store.input_image(job.id) is None  # dropped once terminal


def test_duplicate_ids_are_refused(redis_client: redis.Redis) -> None:
    store = JobStore(redis_client)
    job = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)
    seed(store.redis, job, b"x")
    with pytest.raises(FileExistsError):
        seed(store.redis, job, b"y")


def test_failed_change_writes_nothing(redis_client: redis.Redis) -> None:
    store = JobStore(redis_client)
    job = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)
    seed(store.redis, job, b"x")
    with pytest.raises(Exception, match="queued -> succeeded"):
        store.update(job.id, lambda r: r.transition(JobState.SUCCEEDED))
    assert store.get(job.id).status is JobState.QUEUED


def test_missing_job(redis_client: redis.Redis) -> None:
    with pytest.raises(JobNotFound):
        JobStore(redis_client).get("r1.0000")


def test_running_lists_running_records_and_drops_the_rest(redis_client: redis.Redis) -> None:
    store = JobStore(redis_client)
    jobs = [
        JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=PARAMS)
        for _ in range(2)
    ]
    for job in jobs:
        seed(store.redis, job, b"x")
        store.update(job.id, lambda r: r.transition(JobState.RUNNING))
    assert sorted(r.id for r in store.running("r1")) == sorted(j.id for j in jobs)
    store.update(jobs[0].id, lambda r: r.transition(JobState.SUCCEEDED))
    redis_client.zadd("{animfleet}:running:r1", {"r1.gone": 1.0})  # its record expired
    assert [r.id for r in store.running("r1")] == [jobs[1].id]
    assert redis_client.zrange("{animfleet}:running:r1", 0, -1) == [jobs[1].id.encode()]
