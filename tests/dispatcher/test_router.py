"""Load reporting and the router against a real Redis: heartbeats in, routing tables out."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from animfleet.region.keys import HOLDING_SET, ROUTING_KEY, WAITING_SET
from animfleet.region.status import RegionStatus, read_region_status
from animfleet.region.workers import live_workers
from animfleet.topology import Topology
from dispatcher.router import Router, demand_by_home
from dispatcher.routing import RegionLoad, RoutingTable
from launcher.local_fleet import LocalFleet
from workers.heartbeat import Heartbeat

DBS = {"near-a": 11, "near-b": 12, "far-c": 13}


@pytest.fixture
def topology(servers: LocalFleet) -> Iterator[Topology]:
    latency = {"near-a": {"near-b": 20, "far-c": 250}, "near-b": {"far-c": 240}}
    regions = {
        name: {
            "broker_url": f"redis://127.0.0.1:{servers.redis_port}/{db}",
            "latency_ms": latency.get(name, {}),
        }
        for name, db in DBS.items()
    }
    for db in DBS.values():
        redis.Redis(port=servers.redis_port, db=db).flushdb()
    yield Topology.from_mapping({"regions": regions}, env={})
    for db in DBS.values():
        redis.Redis(port=servers.redis_port, db=db).flushdb()


def beat(
    topology: Topology, region: str, count: int, busy: int, ttl_s: float = 30.0
) -> list[Heartbeat]:
    client = redis.Redis.from_url(topology.region(region).broker_url)
    beats = []
    for index in range(count):
        heartbeat = Heartbeat(client, region, f"w{index}", "tiny", ttl_s=ttl_s)
        heartbeat.busy(f"{region}.job{index}" if index < busy else None)
        beats.append(heartbeat)
    return beats


def test_status_counts_live_busy_and_queued(topology: Topology) -> None:
    region = topology.region("near-a")
    beat(topology, "near-a", count=3, busy=2)
    client = redis.Redis.from_url(region.broker_url)
    client.lpush(region.queue, "m1", "m2")
    status = read_region_status(client, region)
    assert (status.load.live_workers, status.load.busy_workers, status.load.queue_depth) == (
        3,
        2,
        2,
    )
    assert {b["worker"] for b in live_workers(client, "near-a")} == {"w0", "w1", "w2"}


def test_dead_worker_stops_counting_within_its_ttl(topology: Topology) -> None:
    region = topology.region("near-a")
    client = redis.Redis.from_url(region.broker_url)
    beat(topology, "near-a", count=1, busy=0, ttl_s=30)
    beat(topology, "near-a", count=2, busy=1, ttl_s=0.3)  # w0 (again) and w1, short-lived
    assert read_region_status(client, region).load.live_workers == 2
    time.sleep(0.4)  # the short heartbeats lapse; nothing refreshes them
    assert read_region_status(client, region).load.live_workers == 0


def test_warm_stop_leaves_capacity_at_once(topology: Topology) -> None:
    region = topology.region("near-b")
    client = redis.Redis.from_url(region.broker_url)
    first, _ = beat(topology, "near-b", count=2, busy=1)
    first.stop()
    status = read_region_status(client, region).load
    assert (status.live_workers, status.busy_workers) == (1, 0)


def test_router_spills_an_overloaded_region_to_its_nearest_and_writes_every_region(
    topology: Topology,
) -> None:
    beat(topology, "near-a", count=2, busy=2)
    a = topology.region("near-a")
    held = redis.Redis.from_url(a.broker_url)
    held.lpush(a.queue, *[f"m{i}" for i in range(4)])  # 3x load: 2 running, 4 queued
    held.zadd(HOLDING_SET + "near-a", {f"near-a.j{i}": float(i) for i in range(6)})
    beat(topology, "near-b", count=4, busy=0)
    beat(topology, "far-c", count=4, busy=0)

    router = Router(topology)
    table = router.tick()
    router.close()
    assert table.share("near-a", "near-b") > 0, table.shares
    assert table.share("near-a", "far-c") <= table.share("near-a", "near-b")
    assert table.share("near-b", "near-b") == pytest.approx(1.0)
    for name in DBS:
        stored = json.loads(redis.Redis.from_url(topology.region(name).broker_url).get(ROUTING_KEY))
        assert RoutingTable.from_json(json.dumps(stored["table"])).shares == table.shares
        assert stored["loads"]["near-a"] == [2, 2, 4]


def test_router_gives_nothing_to_a_region_without_live_workers(topology: Topology) -> None:
    beat(topology, "near-a", count=1, busy=1)
    a = topology.region("near-a")
    held = redis.Redis.from_url(a.broker_url)
    held.lpush(a.queue, "m1", "m2", "m3")
    held.zadd(HOLDING_SET + "near-a", {f"near-a.j{i}": float(i) for i in range(4)})
    beat(topology, "far-c", count=2, busy=0)  # near-b has no worker at all
    router = Router(topology)
    table = router.tick()
    router.close()
    assert table.share("near-a", "near-b") == 0
    assert table.share("near-a", "far-c") > 0
    assert table.shares["near-b"].get("near-b", 0) == 0


def status(holding: dict[str, int], waiting: int = 0) -> RegionStatus:
    return RegionStatus(
        load=RegionLoad("near-a", 1, 0, 0),
        oldest_queued_age_s=0.0,
        holding=holding,
        waiting=waiting,
    )


def test_demand_counts_a_home_regions_jobs_wherever_they_are() -> None:
    reading = {
        "near-a": status({"near-a": 2, "far-c": 1}, waiting=3),
        "near-b": status({"near-a": 1}),  # a job of near-a spilled to near-b
        "far-c": status({}),
    }
    demand = demand_by_home(reading)
    assert demand == {"near-a": 6.0, "near-b": 0.0, "far-c": 1.0}


def test_jobs_waiting_for_room_unlock_the_far_ring(topology: Topology) -> None:
    beat(topology, "near-a", count=2, busy=2)
    beat(topology, "near-b", count=2, busy=2)  # the near region is full too
    beat(topology, "far-c", count=4, busy=0)
    client = redis.Redis.from_url(topology.region("near-a").broker_url)
    router = Router(topology)
    assert router.tick().share("near-a", "far-c") == 0
    lapse = time.time() + 60
    client.zadd(WAITING_SET + "near-a", {f"waiting-{i}": lapse for i in range(4)})
    client.zadd(HOLDING_SET + "near-a", {"near-a.j1": 1.0, "near-a.j2": 2.0})
    table = router.tick()
    router.close()
    assert table.share("near-a", "far-c") > 0, table.shares
