"""The atomic admission script and the Celery message it pushes, against a real Redis."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord
from animfleet.region.admission import AdmissionOutcome
from animfleet.region.jobstore import JobStore
from animfleet.region.messages import delivery_tag
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from dispatcher.admission import RegionQueue
from launcher.local_fleet import LocalFleet

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)


def queue_for(servers: LocalFleet, client: redis.Redis) -> RegionQueue:
    region = Region(name="q1", broker_url=f"redis://127.0.0.1:{servers.redis_port}/15")
    return RegionQueue(region, JobStore(client), allowance=0.0)


def record(job_id: str) -> JobRecord:
    return JobRecord(id=job_id, region="q1", home_region="q1", params=PARAMS)


@pytest.mark.parametrize(
    "job_id",
    ["q1.0123abcd", "q1." + "f" * 32, "render-1~" + "0" * 20, "a", "x_y-z" * 12, "q1.lb" * 13],
)
def test_templated_message_is_byte_for_byte_what_kombu_builds(
    servers: LocalFleet, redis_client: redis.Redis, job_id: str
) -> None:
    queue = queue_for(servers, redis_client)
    ours, theirs = queue.messages.for_job(job_id), queue.messages.build(job_id)
    tag = json.loads(ours)["properties"]["delivery_tag"]
    kombu_tag = json.loads(theirs)["properties"]["delivery_tag"]
    assert tag != kombu_tag
    assert ours == theirs.replace(kombu_tag, tag)  # only the random tag differs
    parsed = json.loads(ours)
    assert parsed["headers"]["id"] == job_id and parsed["headers"]["argsrepr"] == f"['{job_id}']"
    assert json.loads(base64.b64decode(parsed["body"]))[0] == [job_id]


def test_delivery_tags_are_random_version_4_uuids() -> None:
    tags = [delivery_tag() for _ in range(2000)]
    assert len(set(tags)) == len(tags)
    for tag in tags:
        parsed = uuid.UUID(tag)
        assert str(parsed) == tag and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert {tag[19] for tag in tags} == set("89ab")  # every variant digit, as uuid4 gives


def test_admits_up_to_one_job_per_live_gpu_then_refuses_without_writing(
    servers: LocalFleet, redis_client: redis.Redis
) -> None:
    queue = queue_for(servers, redis_client)
    assert (
        queue.admit(record("q1.a"), b"img").outcome == AdmissionOutcome.FULL
    )  # no live worker: no capacity
    WorkerRegistry(redis_client, "q1").beat("gpu0", {}, ttl_s=30, busy=False)
    first = queue.admit(record("q1.b"), b"img")
    assert (first.outcome, first.live_workers, first.held) == (AdmissionOutcome.ADMITTED, 1, 1)
    assert queue.admit(record("q1.c"), b"img").outcome == AdmissionOutcome.FULL
    assert redis_client.llen("animate.q1") == 1
    assert redis_client.exists("{animfleet}:job:q1.b") and not redis_client.exists(
        "{animfleet}:job:q1.c"
    )


def test_a_bound_idempotency_key_returns_the_earlier_job(
    servers: LocalFleet, redis_client: redis.Redis
) -> None:
    queue = queue_for(servers, redis_client)
    for index in range(3):
        WorkerRegistry(redis_client, "q1").beat(f"gpu{index}", {}, ttl_s=30, busy=False)
    slot = [("{animfleet}:idem:key:k1", 60)]
    assert (
        queue.admit(record("q1.d"), b"img", slot, '{"job_id": "q1.d"}').outcome
        == AdmissionOutcome.ADMITTED
    )
    again = queue.admit(record("q1.e"), b"img", slot, '{"job_id": "q1.e"}')
    assert again.outcome == AdmissionOutcome.REPEAT and again.matched == 1
    assert json.loads(again.earlier or b"{}")["job_id"] == "q1.d"
    assert redis_client.llen("animate.q1") == 1
