"""Affinity placement at admission, on a real Redis: a job goes to the direct queue of an idle
worker holding its template or add-ons, never to a busy, gone or already-served one."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from animfleet.addons import AddonUse
from animfleet.jobs import JobParams, JobRecord
from animfleet.region.admission import AdmissionOutcome, BacklogCaps
from animfleet.region.affinity import (
    DirectQueues,
    Holdings,
    announce_prefetch,
    image_digest,
    parse_prefetch,
    prefetch_channel,
    things_of,
)
from animfleet.region.jobstore import JobStore
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from dispatcher.admission import RegionQueue
from launcher.local_fleet import LocalFleet

DB = 12
IMAGE, OTHER = b"image one", b"image two"


@pytest.fixture
def client(servers: LocalFleet) -> Iterator[redis.Redis]:
    connection = redis.Redis(port=servers.redis_port, db=DB)
    connection.flushdb()
    yield connection
    connection.flushdb()


@pytest.fixture
def region(servers: LocalFleet) -> Region:
    return Region(name="aff", broker_url=f"redis://127.0.0.1:{servers.redis_port}/{DB}")


def record(job_id: str, *addons: str, image: bytes = IMAGE) -> JobRecord:
    params = JobParams(
        prompt="sway", frames=4, fps=8, width=32, height=32, seed=1,
        addons=tuple(AddonUse(name=name, scale=1.0) for name in addons),
        image_sha256=image_digest(image),  # as the submit computes it, once
    )  # fmt: skip
    return JobRecord(id=job_id, region="aff", home_region="aff", params=params, tenant="t")


def workers(client: redis.Redis, region: Region, *names: str, busy: str = "") -> None:
    registry = WorkerRegistry(client, region.name)
    for name in names:
        registry.beat(name, {"worker": name}, ttl_s=60, busy=name == busy)
        DirectQueues(client, region).register(name)


def queued_on(client: redis.Redis, region: Region) -> dict[str, int]:
    queues = [region.queue, *(f"{region.queue}.w.{w}" for w in ("a", "b", "c"))]
    return {q.rsplit(".", 1)[-1]: int(client.llen(q)) for q in queues if client.llen(q)}


def test_an_idle_holder_gets_the_job_on_its_direct_queue(
    client: redis.Redis, region: Region
) -> None:
    workers(client, region, "a", "b", "c")
    Holdings(client, region.name).publish("b", things_of(image_digest(IMAGE)), ttl_s=60)
    queue = RegionQueue(region, JobStore(client), 0.0, BacklogCaps())
    answer = queue.admit(record("j1"), IMAGE)
    assert (answer.outcome, answer.worker) == (AdmissionOutcome.ADMITTED, "b")
    assert queued_on(client, region) == {"b": 1}
    # b has a job waiting now: the next job with the same image goes to the shared queue.
    assert queue.admit(record("j2"), IMAGE).worker is None
    # A job whose image nobody holds goes to the shared queue too.
    assert queue.admit(record("j3", image=OTHER), OTHER).worker is None
    assert queued_on(client, region) == {"aff": 2, "b": 1}


def test_busy_or_gone_holders_are_passed_over_and_most_held_wins(
    client: redis.Redis, region: Region
) -> None:
    workers(client, region, "a", "b", "c", busy="a")
    holdings = Holdings(client, region.name)
    template = things_of(image_digest(IMAGE))
    holdings.publish("a", [*template, "addon:shake"], ttl_s=60)
    holdings.publish("c", template, ttl_s=60)
    holdings.publish("b", ["addon:shake"], ttl_s=60)
    holdings.publish("ghost", template, ttl_s=60)  # holds it, but has no heartbeat
    queue = RegionQueue(region, JobStore(client), 0.0, BacklogCaps())
    # a holds both but is busy; b and c hold one each (ties go by name, so dispatchers agree).
    assert queue.admit(record("j1", "shake"), IMAGE).worker == "b"
    assert queue.admit(record("j2", "shake"), IMAGE).worker == "c"
    assert queue.admit(record("j3", "shake"), IMAGE).worker is None


def test_affinity_off_uses_the_shared_queue(client: redis.Redis, region: Region) -> None:
    workers(client, region, "a")
    Holdings(client, region.name).publish("a", things_of(image_digest(IMAGE)), ttl_s=60)
    queue = RegionQueue(region, JobStore(client), 0.0, BacklogCaps(), affinity=False)
    assert queue.admit(record("j1"), IMAGE).worker is None
    assert queued_on(client, region) == {"aff": 1}


def test_admitting_a_job_with_addons_asks_its_worker_to_prefetch(
    client: redis.Redis, region: Region
) -> None:
    workers(client, region, "a", "b", "c")
    Holdings(client, region.name).publish("a", things_of(image_digest(IMAGE)), ttl_s=60)
    pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(prefetch_channel(region.name))
    queue = RegionQueue(region, JobStore(client), 0.0, BacklogCaps())
    queue.admit(record("j1", "shake", "orbit"), IMAGE)  # to a's direct queue
    queue.admit(record("j2", "pulse", image=OTHER), OTHER)  # to the shared queue
    queue.admit(record("j3", image=OTHER), OTHER)  # no add-ons: no notice
    announce_prefetch(client, region.name, ["sentinel"], None)  # marks the end
    notices = []
    deadline = time.monotonic() + 10
    # get_message answers None for the subscription's own confirmation: read until all arrive.
    while len(notices) < 3 and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        if message is not None:
            notices.append(parse_prefetch(message["data"]))
    assert notices == [(["shake", "orbit"], "a"), (["pulse"], None), (["sentinel"], None)]
    pubsub.close()
    assert json.loads(client.get("{animfleet}:job:j1") or b"{}")["id"] == "j1"
