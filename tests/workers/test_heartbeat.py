"""Heartbeats of one-job and batch workers, as admission and the sweeper read them (real Redis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState
from animfleet.region.admission import AdmissionOutcome, seed
from animfleet.region.affinity import DirectQueues, Holdings
from animfleet.region.jobstore import JobStore
from animfleet.region.sweeper import Sweeper, SweepSettings
from animfleet.region.workers import WorkerRegistry
from animfleet.settings import load
from animfleet.topology import Region
from dispatcher.admission import RegionQueue
from launcher.local_fleet import LocalFleet
from workers.heartbeat import Heartbeat

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)


@pytest.fixture
def region(servers: LocalFleet) -> Region:
    return Region(name="hb", broker_url=f"redis://127.0.0.1:{servers.redis_port}/15")


@pytest.fixture
def batch_beat(redis_client: redis.Redis) -> Iterator[Heartbeat]:
    beat = Heartbeat(redis_client, "hb", "gpu-a", "v1", interval_s=60, ttl_s=30, slots=4)
    beat.beat()
    yield beat
    beat.stop()


def test_a_one_slot_heartbeat_publishes_the_worker_under_its_own_name(
    redis_client: redis.Redis,
) -> None:
    beat = Heartbeat(redis_client, "hb", "gpu-a", "v1", interval_s=60, ttl_s=30)
    beat.busy("hb.job")
    (details,) = WorkerRegistry(redis_client, "hb").live()
    assert details["worker"] == "gpu-a" and details["job_id"] == "hb.job"
    assert set(details) == {"worker", "state", "job_id", "variant", "pid", "at"}
    beat.stop()
    assert WorkerRegistry(redis_client, "hb").live() == []


def test_admission_counts_a_batch_worker_as_one_slot_per_job_it_can_batch(
    redis_client: redis.Redis, region: Region, batch_beat: Heartbeat
) -> None:
    queue = RegionQueue(region, JobStore(redis_client), allowance=0.0)
    outcomes = [
        queue.admit(JobRecord(id=f"hb.{n}", region="hb", home_region="hb", params=PARAMS), b"i")
        for n in range(5)
    ]
    assert [o.outcome for o in outcomes] == [AdmissionOutcome.ADMITTED] * 4 + [
        AdmissionOutcome.FULL
    ]
    assert outcomes[3].live_workers == 4


def test_each_slot_is_busy_with_its_own_job(
    redis_client: redis.Redis, batch_beat: Heartbeat
) -> None:
    registry = WorkerRegistry(redis_client, "hb")
    batch_beat.busy("hb.one", slot=1)
    batch_beat.busy("hb.three", slot=3)
    by_name = {details["worker"]: details for details in registry.live()}
    assert sorted(by_name) == ["gpu-a/0", "gpu-a/1", "gpu-a/2", "gpu-a/3"]
    assert by_name["gpu-a/1"]["job_id"] == "hb.one" and by_name["gpu-a/0"]["state"] == "idle"
    assert by_name["gpu-a/3"]["host_worker"] == "gpu-a" and by_name["gpu-a/3"]["slots"] == 4
    assert redis_client.zrange(registry.busy_key, 0, -1) == [b"gpu-a/1", b"gpu-a/3"]
    batch_beat.busy(None, slot=1)
    batch_beat.beat()
    assert redis_client.zrange(registry.busy_key, 0, -1) == [b"gpu-a/3"]


def test_the_sweeper_requeues_a_slots_job_only_once_the_worker_is_gone(
    redis_client: redis.Redis, region: Region, batch_beat: Heartbeat
) -> None:
    store = JobStore(redis_client)
    seed(store.redis, JobRecord(id="hb.run", region="hb", home_region="hb", params=PARAMS), b"i")

    def start(record: JobRecord) -> None:
        record.transition(JobState.RUNNING)
        record.worker = "gpu-a/2"  # what a batch worker's runner records

    store.update("hb.run", start)
    batch_beat.busy("hb.run", slot=2)
    sweeper = Sweeper(region, store, load(SweepSettings, {}, heartbeat_ttl_s=0.001))

    assert not sweeper.sweep().requeued
    batch_beat.stop()  # every slot leaves (a lost host's details lapse the same way)
    assert sweeper.sweep().requeued == ["hb.run"]
    assert store.get("hb.run").status is JobState.QUEUED


def test_each_slot_claims_the_workers_holdings_and_has_its_own_direct_queue(
    redis_client: redis.Redis, region: Region
) -> None:
    direct = DirectQueues(redis_client, region)
    beat = Heartbeat(
        redis_client,
        "hb",
        "gpu-a",
        "v1",
        interval_s=60,
        ttl_s=30,
        holdings=lambda: ["addon:shake"],
        direct=direct,
        slots=2,
    )
    beat.beat()
    assert Holdings(redis_client, "hb").candidates(["addon:shake"]) == ["gpu-a/0", "gpu-a/1"]
    assert redis_client.smembers(direct.key) == {b"gpu-a/0", b"gpu-a/1"}
    # A slot that is live keeps its direct queue; the sweeper's rescue leaves it alone.
    assert direct.rescue(consuming=WorkerRegistry(redis_client, "hb").is_live) == []
    WorkerRegistry(redis_client, "hb").drain("gpu-a", for_s=30, slots=2)
    beat.beat()
    assert not WorkerRegistry(redis_client, "hb").live()
    beat.stop()


def test_a_thing_evicted_stops_being_claimed_with_the_next_beat(
    redis_client: redis.Redis,
) -> None:
    held = ["template:a", "template:b"]
    beat = Heartbeat(
        redis_client, "hb", "gpu-a", "v1", interval_s=60, ttl_s=30, holdings=lambda: list(held)
    )
    beat.beat()
    assert Holdings(redis_client, "hb").holders(held) == {"gpu-a": 2}
    held.remove("template:a")  # evicted: the claim goes now, not when its TTL lapses
    beat.beat()
    assert Holdings(redis_client, "hb").holders(["template:a", "template:b"]) == {"gpu-a": 1}
    assert Holdings(redis_client, "hb").candidates(["template:a"]) == []
    beat.stop()
