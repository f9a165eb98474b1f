"""One sweeper copy at a time, even across a long pass; a live run past its hard limit or its
deadline is hung, and the sweeper ends or requeues it as if its worker were lost (real Redis)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from animfleet.jobs import JobState
from animfleet.region.jobstore import JobStore
from animfleet.region.keys import SWEEP_LEASE_KEY
from animfleet.region.sweep_lease import SweepLease, SweepLost
from animfleet.region.sweeper import Sweeper
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region
from tests.animfleet.region.test_sweeper import running_job, settings


@pytest.fixture
def region(store_region: Callable[[str], Region]) -> Region:
    return store_region("sw")  # where running_job puts its records


def test_a_copy_whose_lease_lapsed_never_extends_the_next_holders(
    redis_client: redis.Redis,
) -> None:
    slow = SweepLease(redis_client, "sl", "slow-copy", lease_s=0.2)
    other = SweepLease(redis_client, "sl", "other-copy", lease_s=30)
    assert slow.hold() and slow.hold()  # taken, then extended: still its own
    assert not other.hold()
    deadline = time.monotonic() + 5
    while redis_client.exists(SWEEP_LEASE_KEY + "sl"):  # the slow copy's pass outlives it
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.01)
    assert other.hold()
    assert not slow.hold()  # GET-then-PEXPIRE would have extended the other copy's lease
    with pytest.raises(SweepLost):
        slow.keep()  # mid-pass: the slow copy stops
    assert redis_client.get(SWEEP_LEASE_KEY + "sl") == b"other-copy"
    assert int(redis_client.pttl(SWEEP_LEASE_KEY + "sl")) > 20_000


def test_a_sweeper_whose_lease_another_copy_holds_changes_nothing(
    redis_client: redis.Redis, region: Region
) -> None:
    store = JobStore(redis_client)
    running_job(store, "sl.lost", "gone")
    SweepLease(redis_client, "sw", "other-copy", lease_s=30).hold()
    assert Sweeper(region, store, settings()).sweep().requeued == []
    assert store.get("sl.lost").status is JobState.RUNNING


def test_a_live_run_past_its_hard_limit_or_deadline_is_ended_like_a_lost_one(
    redis_client: redis.Redis, region: Region
) -> None:
    store = JobStore(redis_client)
    now = time.time()
    hung = running_job(store, "sl.hung", "slot/0")
    late = running_job(store, "sl.late", "slot/1", deadline=now + 5)
    running_job(store, "sl.fine", "slot/2")
    assert hung.started_at is not None
    started = hung.started_at + 30  # half-way through its limit when the other one is past it
    store.update("sl.fine", lambda record: setattr(record, "started_at", started))
    for slot in ("slot/0", "slot/1", "slot/2"):  # every run's worker is alive
        WorkerRegistry(redis_client, "sw").beat(slot, {}, ttl_s=30, busy=True)
    sweeper = Sweeper(region, store, settings(hard_time_limit_s=60))

    assert sweeper.sweep(now).requeued == []  # within their limits: alive, untouched
    result = sweeper.sweep(hung.started_at + 60.5)  # past the hard limit (+ 3 TTLs of 1 ms)

    assert result.requeued == ["sl.hung"]
    assert result.ended == {"sl.late": "canceled"}  # past its deadline (+ 3 TTLs) as well
    late_record = store.get(late.id)
    assert late_record.error is not None and late_record.error.code == "deadline_exceeded"
    requeued = store.get("sl.hung")
    assert requeued.status is JobState.QUEUED and requeued.run is None
    assert store.get("sl.fine").status is JobState.RUNNING
