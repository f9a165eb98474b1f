"""A finished record the sweeper archived is still read through the client, from the bucket."""

from __future__ import annotations

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.archive import RecordArchive
from animfleet.region.jobstore import JobNotFound, JobStore
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from storage import open_store

PARAMS = JobParams(prompt="zoom in", frames=4, fps=8, width=32, height=32, seed=3)


def test_an_archived_record_is_read_from_the_bucket(servers: LocalFleet) -> None:
    topology = servers.topology
    name = topology.names[0]
    region = topology.region(name)
    store = JobStore(redis.Redis.from_url(region.broker_url))
    job_id = new_job_id(name)
    seed(store.redis, JobRecord(id=job_id, region=name, home_region=name, params=PARAMS), b"x")
    store.update(job_id, lambda record: record.end(JobState.CANCELED, "canceled", "by request"))
    archive = RecordArchive(open_store(region.storage), region.storage.prefix)
    assert store.archive(job_id, name, archive)
    with pytest.raises(JobNotFound):
        store.get(job_id)

    client = Client(topology)
    try:
        record = client.get(job_id)
        assert record.id == job_id and record.status is JobState.CANCELED
        with pytest.raises(JobNotFound):
            client.get(new_job_id(name))  # neither in Redis nor archived
    finally:
        client.close()
