"""Writes whose reply is lost after Redis ran them, through a real TCP proxy that drops that one
reply: the store client's retry is answered with what happened, never a second write."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState
from animfleet.region.admission import _ADMIT, AdmissionOutcome, seed
from animfleet.region.jobstore import JobStore
from animfleet.region.runs import RunLeases
from animfleet.region.store_client import store_client
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from dispatcher.admission import RegionQueue
from launcher.local_fleet import LocalFleet
from tests.fixtures.reply_drop import ReplyDropProxy

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)
DB = 14


@pytest.fixture
def proxy(servers: LocalFleet) -> Iterator[ReplyDropProxy]:
    running = ReplyDropProxy(servers.redis_port).start()
    yield running
    running.stop()


@pytest.fixture
def direct(servers: LocalFleet) -> Iterator[redis.Redis]:
    client = redis.Redis(port=servers.redis_port, db=DB)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def proxied(proxy: ReplyDropProxy, direct: redis.Redis) -> Iterator[redis.Redis]:
    del direct  # emptied first
    client = store_client(f"redis://127.0.0.1:{proxy.port}/{DB}")
    yield client
    client.close()


def record(job_id: str) -> JobRecord:
    return JobRecord(id=job_id, region="lr", home_region="lr", params=PARAMS)


def test_a_lost_admission_reply_is_answered_with_the_job_it_admitted(
    proxy: ReplyDropProxy, proxied: redis.Redis, direct: redis.Redis
) -> None:
    region = Region(
        name="lr",
        broker_url=f"redis://127.0.0.1:{proxy.port}/{DB}",
        store_url=f"redis://127.0.0.1:{proxy.port}/{DB}",
    )
    queue = RegionQueue(region, JobStore(proxied), allowance=1.0)
    WorkerRegistry(direct, "lr").beat("gpu0", {}, ttl_s=30, busy=False)  # room for two jobs
    seed(proxied, record("lr.warm"), b"x")  # holds one; the script is loaded from here on

    trigger = proxy.drop_reply(hashlib.sha1(_ADMIT.encode()).hexdigest().encode())
    answer = queue.admit(record("lr.job"), b"img", backlog=True)

    assert trigger.fired == 1
    # The retry found the slot taken by its own first run: it answers that run's outcome,
    # rather than putting the same job in the backlog too (or calling it a duplicate id).
    assert answer.outcome is AdmissionOutcome.ADMITTED
    assert direct.llen("animate.lr") == 1
    assert direct.zcard("{animfleet}:backlog-all:lr") == 0


def test_a_lost_start_reply_is_the_run_it_started(
    proxy: ReplyDropProxy, proxied: redis.Redis, direct: redis.Redis
) -> None:
    runs = RunLeases(JobStore(proxied))
    seed(direct, record("lr.run"), b"x")
    trigger = proxy.drop_reply(b"MULTI", b"run-lease:lr.run", b"EXEC")

    started, run = runs.start("lr.run", "gpu-a", ttl_s=30)  # no LeaseHeld on its own lease

    assert trigger.fired == 1
    assert run is not None and started.run == run.token
    assert started.status is JobState.RUNNING and started.attempts == 1
    assert JobStore(direct).get("lr.run").attempts == 1
