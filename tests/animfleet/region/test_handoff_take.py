"""The hand-off when saturated, on a real Redis: a freed worker gets the backlog job it holds
warm, no job is passed over more than the bypass limit, and tenants keep their shares."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord
from animfleet.region.affinity import DirectQueues, Holdings, image_digest, things_of
from animfleet.region.backlog import Backlog
from animfleet.region.handoff import Handoff
from animfleet.region.handoff_take import HandoffSettings
from animfleet.region.jobstore import JobStore
from animfleet.region.keys import KEY_PREFIX
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from dispatcher.admission import RegionQueue

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)


@pytest.fixture
def region(store_region: Callable[[str], Region]) -> Region:
    return store_region("h1")


@pytest.fixture
def queue(region: Region) -> str:
    """The list the take script pushes onto: the GPU queue with the broker in the store; on a
    cluster (whose broker is always apart, so production goes through the outbox, see
    test_broker_outbox.py) a list of the store's stands in for it, to run the script there."""
    return region.queue if region.store_is_broker else KEY_PREFIX + "queue:" + region.queue


def image(index: int) -> bytes:
    return f"image {index}".encode()


def backlog_jobs(
    client: redis.Redis,
    region: Region,
    tenant: str,
    images: list[int],
    weights: dict[str, float] | None = None,
) -> list[str]:
    """Jobs of ``tenant`` waiting in the backlog, oldest first, the n-th using ``images[n]``."""
    q = RegionQueue(region, JobStore(client), 0.0, affinity=False)
    now = time.time()
    ids = []
    for order, index in enumerate(images):
        job_id = f"h1.{tenant}{order}"
        params = PARAMS.model_copy(update={"image_sha256": image_digest(image(index))})
        job = JobRecord(
            id=job_id, region="h1", home_region="h1", params=params, tenant=tenant,
            created_at=now + order,
        )  # fmt: skip
        q.admit(job, image(index), backlog=True)
        ids.append(job_id)
    if weights:
        Backlog(client, "h1").set_weights(weights)
    return ids


def worker(
    client: redis.Redis, region: Region, name: str, holds: list[int], busy: bool = False
) -> None:
    WorkerRegistry(client, "h1").beat(name, {}, ttl_s=60, busy=busy)
    DirectQueues(client, region).register(name)
    things = [thing for index in holds for thing in things_of(image_digest(image(index)))]
    Holdings(client, "h1").publish(name, things, ttl_s=60)


def run_next(client: redis.Redis, queue: str, name: str) -> str | None:
    """The worker pops its direct queue and finishes the job at once; the job's id."""
    if client.rpop(f"{queue}.w.{name}") is None:
        return None
    queued: list[bytes] = client.zrange("{animfleet}:queued:h1", 0, -1)  # type: ignore[assignment]
    assert len(queued) == 1  # the one job the worker was handed
    client.zrem("{animfleet}:queued:h1", queued[0])
    return queued[0].decode()


def test_a_freed_worker_gets_the_job_it_holds_and_the_others_count_a_bypass(
    redis_client: redis.Redis,
    region: Region,
    queue: str,
) -> None:
    ids = backlog_jobs(redis_client, region, "t", [0, 1, 2, 3, 4])
    worker(redis_client, region, "w1", holds=[3])
    worker(redis_client, region, "w2", holds=[1], busy=True)
    handoff = Handoff(redis_client, "h1", queue, 0.0)
    taken = handoff.move_home()
    assert (taken.jobs, taken.placed) == ([ids[3]], ["w1"])
    assert redis_client.llen(f"{queue}.w.w1") == 1
    assert redis_client.llen(queue) == 0
    counts: dict[bytes, bytes] = redis_client.hgetall("{animfleet}:backlog-bypass:h1")  # type: ignore[assignment]
    bypass = {job.decode(): int(count) for job, count in counts.items()}
    assert bypass == {ids[0]: 1, ids[1]: 1, ids[2]: 1}


def test_without_the_handoff_or_a_holder_the_head_goes_first(
    redis_client: redis.Redis, region: Region, queue: str
) -> None:
    ids = backlog_jobs(redis_client, region, "t", [0, 1, 2])
    worker(redis_client, region, "w1", holds=[2])
    off = Handoff(redis_client, "h1", queue, 0.0, HandoffSettings(enabled=False))
    assert (off.move_home().jobs, redis_client.llen(queue)) == ([ids[0]], 1)
    redis_client.delete(queue, "{animfleet}:queued:h1")
    Holdings(redis_client, "h1").withdraw("w1", things_of(image_digest(image(2))))
    on = Handoff(redis_client, "h1", queue, 0.0)
    taken = on.move_home()  # it holds nothing the backlog needs: the head
    assert (taken.jobs, taken.placed) == ([ids[1]], ["w1"])


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_no_job_is_passed_over_more_than_the_bypass_limit(
    redis_client: redis.Redis, region: Region, queue: str, limit: int
) -> None:
    # The head's image is cold; every job behind it is warm on the only worker.
    ids = backlog_jobs(redis_client, region, "t", [9] + [1] * 8)
    worker(redis_client, region, "w1", holds=[1])
    handoff = Handoff(redis_client, "h1", queue, 0.0, HandoffSettings(bypass_limit=limit))
    order = []
    for _ in range(len(ids)):
        order.extend(handoff.move_home().jobs)
        run_next(redis_client, queue, "w1")
    assert order.index(ids[0]) == limit  # taken at the hand-off after its limit-th bypass
    assert sorted(order) == sorted(ids)
    assert redis_client.hlen("{animfleet}:backlog-bypass:h1") == 0  # counts leave with the jobs


def test_affinity_never_moves_a_job_past_its_window(
    redis_client: redis.Redis, region: Region, queue: str
) -> None:
    ids = backlog_jobs(redis_client, region, "t", [0, 0, 0, 5])
    worker(redis_client, region, "w1", holds=[5])
    handoff = Handoff(redis_client, "h1", queue, 0.0, HandoffSettings(window=3))
    assert handoff.move_home().jobs == [ids[0]]  # image 5 is 4th: outside a window of 3


@pytest.mark.parametrize("borrow", [0, 1, 2])
def test_tenants_keep_their_weighted_share_whatever_the_worker_holds(
    redis_client: redis.Redis, region: Region, queue: str, borrow: int
) -> None:
    # Tenant a's jobs are all cold, tenant b's all warm: affinity alone would serve only b.
    a = backlog_jobs(redis_client, region, "a", [100 + n for n in range(40)])
    b = backlog_jobs(redis_client, region, "b", [1] * 40, weights={"a": 2.0, "b": 1.0})
    worker(redis_client, region, "w1", holds=[1])
    settings = HandoffSettings(bypass_limit=4, borrow=borrow)
    handoff = Handoff(redis_client, "h1", queue, 0.0, settings)
    served: Counter[str] = Counter()
    for turn in range(1, 31):
        (job,) = handoff.move_home().jobs
        served["a" if job in a else "b" if job in b else "?"] += 1
        run_next(redis_client, queue, "w1")
        # b takes warm jobs out of turn, never more than ``borrow`` ahead of its share.
        assert 0 <= served["b"] - turn // 3 <= borrow + 1, (turn, served)
    assert served["a"] + served["b"] == 30 and abs(served["b"] - 10) <= borrow


def test_a_worker_holding_nothing_leaves_another_workers_warm_job_to_it(
    redis_client: redis.Redis,
    region: Region,
    queue: str,
) -> None:
    ids = backlog_jobs(redis_client, region, "t", [0, 1])
    worker(redis_client, region, "w1", holds=[])
    worker(
        redis_client, region, "w2", holds=[0], busy=True
    )  # frees soon, and holds the head's image
    taken = Handoff(redis_client, "h1", queue, 0.0).move_home()
    assert (taken.jobs, taken.placed) == ([ids[1]], ["w1"])


def test_a_job_removed_from_the_backlog_drops_its_bypass_count(
    redis_client: redis.Redis, region: Region, queue: str
) -> None:
    ids = backlog_jobs(redis_client, region, "t", [0, 1])
    worker(redis_client, region, "w1", holds=[1])
    Handoff(redis_client, "h1", queue, 0.0).move_home()
    assert redis_client.hexists("{animfleet}:backlog-bypass:h1", ids[0])
    Backlog(redis_client, "h1").remove(ids[0], "t")  # canceled while waiting
    assert not redis_client.hexists("{animfleet}:backlog-bypass:h1", ids[0])
