"""Slot members of a batch worker in the region's worker registry, on a real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from animfleet.region.broker_outbox import claims_key
from animfleet.region.workers import WorkerRegistry, slot_names


def test_a_one_slot_worker_keeps_its_own_name_and_a_batch_worker_names_its_slots() -> None:
    assert slot_names("gpu-a", 1) == ["gpu-a"]
    assert slot_names("gpu-a", 3) == ["gpu-a/0", "gpu-a/1", "gpu-a/2"]
    with pytest.raises(ValueError, match="slots must be at least 1, got 0"):
        slot_names("gpu-a", 0)


def test_draining_a_batch_worker_takes_every_slot_out_and_keeps_it_out(
    redis_client: redis.Redis,
) -> None:
    registry = WorkerRegistry(redis_client, "rw")
    for member in [*slot_names("gpu-a", 3), "gpu-b"]:
        registry.beat(member, {"worker": member}, ttl_s=30, busy=member == "gpu-a/1")
    assert (redis_client.zcard(registry.live_key), redis_client.zcard(registry.busy_key)) == (4, 1)

    registry.drain("gpu-a", for_s=30, slots=3)

    assert redis_client.zrange(registry.live_key, 0, -1) == [b"gpu-b"]
    assert redis_client.zcard(registry.busy_key) == 0
    assert not registry.beat("gpu-a/1", {}, ttl_s=30, busy=True)  # its beats stay out
    assert registry.present("gpu-a/1")  # the sweeper still sees it finishing its job
    assert redis_client.zcard(registry.live_key) == 1


def test_a_busy_beat_ends_the_workers_direct_claim_and_an_idle_one_keeps_it(
    redis_client: redis.Redis,
) -> None:
    """A job handed to a worker through the broker outbox counts as queued for it (its claim)
    until the worker starts it: then the busy set says so, and once it is idle again it can
    take the next job at once instead of waiting out the claim."""
    registry = WorkerRegistry(redis_client, "rw")
    claims = claims_key("rw")
    redis_client.hset(claims, mapping={"gpu-a": time.time() + 3, "gpu-b": time.time() + 3})

    registry.beat("gpu-a", {}, ttl_s=30, busy=False)  # not started yet: still claimed
    assert redis_client.hexists(claims, "gpu-a")
    registry.beat("gpu-a", {}, ttl_s=30, busy=True)  # started the job it was handed
    assert not redis_client.hexists(claims, "gpu-a")
    assert redis_client.hexists(claims, "gpu-b")  # another worker's claim stands
