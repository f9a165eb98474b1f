"""Run leases on a real Redis: a run starts with a lease and a token, a live lease defers other
deliveries, a lapsed one is taken over, stale writes are refused, and the sweeper judges a
running job by its own run's lease, not by its worker's name."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.region.runs import LeaseHeld, RunFenced, RunLeases
from animfleet.region.sweeper import Sweeper, SweepSettings
from animfleet.region.workers import WorkerRegistry
from animfleet.settings import load
from animfleet.topology import Region

PARAMS = JobParams(prompt="pan left", frames=4, fps=8, width=32, height=32, seed=1)


@pytest.fixture
def runs(redis_client: redis.Redis) -> RunLeases:
    return RunLeases(JobStore(redis_client))


@pytest.fixture
def region(store_region: Callable[[str], Region]) -> Region:
    return store_region("rl")


def queued(runs: RunLeases, job_id: str) -> None:
    seed(runs.store.redis, JobRecord(id=job_id, region="rl", home_region="rl", params=PARAMS), b"x")


def lapse(client: redis.Redis, job_id: str) -> None:
    """The run stopped renewing: its lease expires (as it would after its TTL)."""
    client.delete(RunLeases.key(job_id))


def test_a_live_lease_defers_a_second_start_and_a_lapsed_one_is_taken_over(
    runs: RunLeases, redis_client: redis.Redis
) -> None:
    queued(runs, "rl.job")
    record, first = runs.start("rl.job", "gpu-a", ttl_s=30)
    assert first is not None and record.run == first.token and record.worker == "gpu-a"
    assert record.status is JobState.RUNNING and record.attempts == 1
    assert runs.live(record)

    with pytest.raises(LeaseHeld) as held:
        runs.start("rl.job", "gpu-b", ttl_s=30)
    assert held.value.worker == "gpu-a" and 0 < held.value.remaining_s <= 30
    assert runs.store.get("rl.job").run == first.token  # nothing written

    lapse(redis_client, "rl.job")
    record, second = runs.start("rl.job", "gpu-b", ttl_s=30)
    assert second is not None and second.token != first.token
    assert record.attempts == 2 and record.worker == "gpu-b"

    def step(current: JobRecord) -> None:
        current.progress.step = 5

    with pytest.raises(RunFenced):  # the first run's writes are refused from now on
        runs.write(first, step, ttl_s=30)
    assert not runs.renew(first, ttl_s=30)
    assert runs.renew(second, ttl_s=30)
    assert runs.write(second, step, ttl_s=30).progress.step == 5


def test_a_finish_drops_the_lease_and_a_later_delivery_does_not_start(
    runs: RunLeases, redis_client: redis.Redis
) -> None:
    queued(runs, "rl.done")
    _, run = runs.start("rl.done", "gpu-a", ttl_s=30)
    assert run is not None
    runs.write(run, lambda record: record.transition(JobState.SUCCEEDED), ttl_s=30)
    assert not redis_client.exists(RunLeases.key("rl.done"))
    with pytest.raises(Exception, match="succeeded"):
        runs.start("rl.done", "gpu-b", ttl_s=30)


def test_the_sweeper_requeues_a_job_whose_run_lease_lapsed_though_its_worker_beats(
    runs: RunLeases, redis_client: redis.Redis, region: Region
) -> None:
    # The stuck case: the pool child running the job was SIGKILLed; the next pool child
    # heartbeats under the same worker name, but nothing renews the dead run's lease.
    registry = WorkerRegistry(redis_client, "rl")
    registry.beat("gpu-a", {}, ttl_s=30, busy=False)
    queued(runs, "rl.dead")
    queued(runs, "rl.alive")
    _, dead = runs.start("rl.dead", "gpu-a", ttl_s=30)
    _, alive = runs.start("rl.alive", "gpu-a", ttl_s=30)
    assert dead is not None and alive is not None
    lapse(redis_client, "rl.dead")
    sweeper = Sweeper(region, runs.store, load(SweepSettings, {}, heartbeat_ttl_s=0.001))

    assert sweeper.sweep().requeued == ["rl.dead"]
    requeued = runs.store.get("rl.dead")
    assert requeued.status is JobState.QUEUED and requeued.run is None
    assert runs.store.get("rl.alive").status is JobState.RUNNING  # its lease is live
    with pytest.raises(RunFenced):  # were the dead run still writing, it would be refused
        runs.write(dead, lambda record: None, ttl_s=30)
    _, again = runs.start("rl.dead", "gpu-b", ttl_s=30)  # its message was pushed: it runs
    assert again is not None and runs.store.get("rl.dead").attempts == 2
