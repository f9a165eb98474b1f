"""The broker outbox with the broker apart from the store: a real Redis store, and a real
RabbitMQ node (quorum queues) or a Redis of its own as the broker."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import pytest
import redis
from kombu import Connection

from animfleet.jobs import JobParams, JobRecord, JobState
from animfleet.region.admission import AdmissionOutcome, AdmissionScript
from animfleet.region.affinity import DirectQueues, direct_queue
from animfleet.region.broker import (
    DELIVERY_LIMIT,
    BrokerLink,
    dead_letter_queue,
    region_queue,
)
from animfleet.region.broker_outbox import GRACE_S, BrokerOutbox
from animfleet.region.handoff import Handoff
from animfleet.region.jobstore import JobStore
from animfleet.region.messages import AnimateMessages
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from launcher.local_fleet import LocalFleet

PARAMS = JobParams(prompt="pan left", frames=4, fps=8, width=32, height=32, seed=1)
_names = itertools.count()


@pytest.fixture(params=["rabbitmq", "redis"])
def region(request: pytest.FixtureRequest, servers: LocalFleet) -> Iterator[Region]:
    """A region with a fresh name (fresh queues) whose store is database 15 of the private
    Redis and whose broker is the private RabbitMQ node, or database 14 of that Redis."""
    store = f"redis://127.0.0.1:{servers.redis_port}/15"
    if request.param == "rabbitmq":
        broker = request.getfixturevalue("rabbitmq").broker_url("rq")
    else:
        broker = f"redis://127.0.0.1:{servers.redis_port}/14"
        redis.Redis.from_url(broker).flushdb()
    yield Region(name=f"bo{next(_names)}", broker_url=broker, store_url=store)


def received(region: Region, queue: str) -> list[tuple[str, int]]:
    """(job id, deferrals) of every message on ``queue``, taken off it."""
    found: list[tuple[str, int]] = []
    if region.broker_url.startswith("redis"):
        client = redis.Redis.from_url(region.broker_url)
        while (raw := client.rpop(queue)) is not None:
            headers = json.loads(raw)["headers"]
            found.append((headers["id"], int(headers["retries"])))
        return found
    with Connection(region.broker_url) as connection:
        bound = region_queue(region, queue).bind(connection.default_channel)
        bound.declare()
        while (message := bound.get(no_ack=True)) is not None:
            found.append((message.headers["id"], int(message.headers["retries"])))
    return found


def admit(store: JobStore, region: Region, job_id: str, publish: bool = True) -> BrokerOutbox:
    outbox = BrokerOutbox(store, region)
    record = JobRecord(id=job_id, region=region.name, home_region=region.name, params=PARAMS)
    answer = AdmissionScript(store.redis, region.name).admit(
        record,
        b"x",
        mode="direct",
        message=AnimateMessages(region).for_job(job_id),
        queue=region.queue,
        outbox=True,
    )
    assert answer.outcome is AdmissionOutcome.ADMITTED and answer.outbox_entry
    if publish:
        assert outbox.deliver([answer.outbox_entry]) == 1
    return outbox


def test_admission_publishes_at_once_and_the_outbox_empties(
    redis_client: redis.Redis, region: Region
) -> None:
    outbox = admit(JobStore(redis_client), region, "job-1")
    assert outbox.pending() == 0
    assert received(region, region.queue) == [("job-1", 0)]
    outbox.link.close()


def test_the_relay_publishes_what_a_dead_publisher_left_once_its_grace_is_over(
    redis_client: redis.Redis, region: Region
) -> None:
    outbox = admit(JobStore(redis_client), region, "job-2", publish=False)  # died here
    assert outbox.relay() == 0  # within the admitting process's grace
    assert received(region, region.queue) == []
    assert outbox.relay(now=time.time() + GRACE_S + 0.1) == 1
    assert outbox.pending() == 0
    assert received(region, region.queue) == [("job-2", 0)]
    outbox.link.close()


def test_a_deferral_is_published_when_due_with_its_count(
    redis_client: redis.Redis, region: Region
) -> None:
    outbox = BrokerOutbox(JobStore(redis_client), region)
    outbox.defer(region.queue, AnimateMessages(region).build("job-3", retries=2), delay_s=30)
    assert outbox.relay(now=time.time() + 29) == 0
    assert outbox.relay(now=time.time() + 31) == 1
    assert received(region, region.queue) == [("job-3", 2)]
    outbox.link.close()


def test_the_backlog_moves_home_through_the_outbox_to_an_idle_workers_direct_queue(
    redis_client: redis.Redis, region: Region
) -> None:
    store = JobStore(redis_client)
    for job_id in ("b-1", "b-2"):
        record = JobRecord(id=job_id, region=region.name, home_region=region.name, params=PARAMS)
        AdmissionScript(redis_client, region.name).admit(
            record, b"x", mode="backlog", message=AnimateMessages(region).for_job(job_id),
            queue=region.queue, allowance=1.0, outbox=True,
        )  # fmt: skip
    # No worker at admission: both wait in the backlog; then one comes up, idle.
    WorkerRegistry(redis_client, region.name).beat("gpu-1", {}, ttl_s=30, busy=False)
    DirectQueues(redis_client, region).register("gpu-1")
    handoff = Handoff(redis_client, region.name, region.queue, allowance=1.0, outbox=True)
    taken = handoff.move_home()
    assert taken.jobs == ["b-1", "b-2"]
    # The idle worker gets the first; claimed, it gets no second before it starts that one.
    assert taken.placed == ["gpu-1", ""]
    outbox = BrokerOutbox(store, region)
    assert outbox.deliver(taken.outbox_entries) == 2
    assert received(region, direct_queue(region, "gpu-1")) == [("b-1", 0)]
    assert received(region, region.queue) == [("b-2", 0)]
    outbox.link.close()


def test_a_gone_workers_direct_queue_moves_to_the_shared_one(region: Region) -> None:
    link = BrokerLink(region)
    direct = f"{region.queue}.w.gone"
    for job_id in ("d-1", "d-2"):
        link.publish(direct, AnimateMessages(region).for_job(job_id))
    assert link.depth(direct) == 2
    assert link.move_all(direct, region.queue) == 2
    assert link.depth(direct) == 0
    assert [job for job, _ in received(region, region.queue)] == ["d-1", "d-2"]
    link.close()


def test_a_dead_lettered_job_is_queued_again_until_it_used_its_deliveries(
    redis_client: redis.Redis, servers: LocalFleet, rabbitmq: LocalFleet
) -> None:
    region = Region(
        name=f"bo{next(_names)}",
        broker_url=rabbitmq.broker_url("rq"),
        store_url=f"redis://127.0.0.1:{servers.redis_port}/15",
    )
    store = JobStore(redis_client)
    outbox = admit(store, region, "poison-1")
    outcomes = []
    for _ in range(2):  # max_deliveries 2: queued again once, then failed
        with Connection(region.broker_url) as connection:
            queue = region_queue(region, region.queue).bind(connection.default_channel)
            for _ in range(DELIVERY_LIMIT + 1):  # a worker that dies with it, every time
                message = queue.get(no_ack=False)
                assert message is not None
                message.requeue()
            assert queue.get(no_ack=False) is None  # dead-lettered, off the work queue
        # RabbitMQ moves a dead letter on its own time (at least once): wait for it.
        deadline = time.monotonic() + 30
        while outbox.link.depth(dead_letter_queue(region)) == 0:
            assert time.monotonic() < deadline, "not dead-lettered within 30 s"
            time.sleep(0.05)
        outcomes.append(outbox.end_dead_letters(max_deliveries=2))
    assert outcomes == [{"poison-1": "queued"}, {"poison-1": "failed"}]
    record = store.get("poison-1")
    assert record.status is JobState.FAILED
    assert record.error is not None and record.error.code == "worker_lost"
    assert outbox.end_dead_letters() == {}
    assert outbox.link.depth(region.queue) == 0  # the failed job got no new message
    outbox.link.close()
