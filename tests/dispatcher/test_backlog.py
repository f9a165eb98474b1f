"""The backlog scripts against a real Redis: admission, fair share, skips, caps and spills."""

from __future__ import annotations

import time

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState
from animfleet.region.admission import AdmissionOutcome, BacklogCaps
from animfleet.region.backlog import Backlog
from animfleet.region.handoff import Handoff
from animfleet.region.jobstore import JobStore
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Region, Topology
from dispatcher.admission import AdmissionSettings, RegionQueue
from dispatcher.routing import RoutingTable
from dispatcher.scheduler import RegionScheduler, SchedulerSettings, spill_slot
from launcher.local_fleet import LocalFleet
from tests.conftest import EmptyDbs

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)
DBS = {"b1": 13, "b2": 14}


@pytest.fixture
def dbs(empty_dbs: EmptyDbs) -> dict[str, redis.Redis]:
    return empty_dbs(DBS)


def region(servers: LocalFleet, name: str) -> Region:
    return Region(name=name, broker_url=f"redis://127.0.0.1:{servers.redis_port}/{DBS[name]}")


def queue(servers: LocalFleet, client: redis.Redis, name: str = "b1") -> RegionQueue:
    return RegionQueue(region(servers, name), JobStore(client), 0.0, BacklogCaps(3, 5))


def record(job_id: str, tenant: str = "t", priority: int = 5, **more: float) -> JobRecord:
    return JobRecord(
        id=job_id, region="b1", home_region="b1", params=PARAMS, tenant=tenant,
        priority=priority, **more,
    )  # fmt: skip


def gpus(client: redis.Redis, count: int, name: str = "b1") -> None:
    for index in range(count):
        WorkerRegistry(client, name).beat(f"gpu{index}", {}, ttl_s=60, busy=False)


def test_direct_while_a_gpu_is_free_then_backlog_then_caps(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    client = dbs["b1"]
    q = queue(servers, client)
    assert (
        q.admit(record("b1.x"), b"img").outcome == AdmissionOutcome.FULL
    )  # no GPU, no backlog asked: nothing
    gpus(client, 1)
    assert q.admit(record("b1.a"), b"img", backlog=True).outcome == AdmissionOutcome.ADMITTED
    assert client.llen("animate.b1") == 1
    assert q.admit(record("b1.b"), b"img", backlog=True).outcome == AdmissionOutcome.BACKLOGGED
    assert client.llen("animate.b1") == 1 and q.script.backlog.depth() == 1
    assert client.get("{animfleet}:job:b1.b") and client.get("{animfleet}:input:b1.b") == b"img"
    for index in range(2):
        assert (
            q.admit(record(f"b1.c{index}"), b"i", backlog=True).outcome
            == AdmissionOutcome.BACKLOGGED
        )
    tenant_full = q.admit(record("b1.d"), b"img", backlog=True)  # tenant cap 3
    assert (tenant_full.outcome, tenant_full.cap) == (AdmissionOutcome.CAPPED, "tenant")
    assert not client.exists("{animfleet}:job:b1.d")
    for index in range(2):
        q.admit(record(f"b1.e{index}", tenant="u"), b"i", backlog=True)
    region_full = q.admit(record("b1.f", tenant="v"), b"img", backlog=True)  # region cap 5
    assert (region_full.outcome, region_full.cap) == (AdmissionOutcome.CAPPED, "region")


def test_moves_home_by_weighted_round_robin_then_priority_then_fifo(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    client = dbs["b1"]
    q = RegionQueue(region(servers, "b1"), JobStore(client), 0.0)
    now = time.time()
    for index in range(6):
        q.admit(record(f"b1.a{index}", "a", created_at=now + index), b"i", backlog=True)
    for index in range(3):
        q.admit(record(f"b1.b{index}", "b", created_at=now + index), b"i", backlog=True)
    q.admit(record("b1.urgent", "b", priority=9, created_at=now + 9), b"i", backlog=True)
    q.script.backlog.set_weights({"a": 2})
    handoff = Handoff(client, "b1", "animate.b1", 0.0)
    assert handoff.move_home().jobs == []  # no GPU: nothing moves
    gpus(client, 10)
    taken = handoff.move_home()
    assert taken.jobs == [
        "b1.a0", "b1.a1", "b1.urgent", "b1.a2", "b1.a3", "b1.b0", "b1.a4", "b1.a5", "b1.b1",
        "b1.b2",
    ]  # fmt: skip
    assert client.llen("animate.b1") == 10 and client.zcard("{animfleet}:queued:b1") == 10
    assert taken.remaining == 0 and q.script.backlog.depth() == 0


def test_canceled_and_overdue_jobs_never_reach_the_gpu_queue(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    client = dbs["b1"]
    q, store = RegionQueue(region(servers, "b1"), JobStore(client), 0.0), JobStore(client)
    q.admit(record("b1.gone"), b"i", backlog=True)
    q.admit(record("b1.late", start_deadline=time.time() + 0.05), b"i", backlog=True)
    q.admit(record("b1.ok"), b"i", backlog=True)
    store.update("b1.gone", lambda r: r.end(JobState.CANCELED, "canceled", "by test"))
    time.sleep(0.1)
    gpus(client, 3)
    taken = Handoff(client, "b1", "animate.b1", 0.0).move_home()
    assert (taken.jobs, taken.skipped, taken.overdue) == (["b1.ok"], ["b1.gone"], ["b1.late"])
    assert client.llen("animate.b1") == 1


def test_positions_follow_the_fair_share(servers: LocalFleet, dbs: dict[str, redis.Redis]) -> None:
    client = dbs["b1"]
    q = RegionQueue(region(servers, "b1"), JobStore(client), 0.0)
    now = time.time()
    for index in range(100):
        q.admit(record(f"b1.a{index}", "a", created_at=now + index), b"i", backlog=True)
    for index in range(3):
        q.admit(record(f"b1.b{index}", "b", created_at=now + 200 + index), b"i", backlog=True)
    backlog = Backlog(client, "b1")
    assert backlog.jobs_ahead("b1.b0", "b") == 1  # one of a's, then b's first
    assert backlog.jobs_ahead("b1.b2", "b") == 5
    assert backlog.jobs_ahead("b1.a10", "a") == 13  # a's ten, and all three of b's
    assert backlog.jobs_ahead("b1.nope", "a") is None


def test_two_schedulers_one_lease(servers: LocalFleet, dbs: dict[str, redis.Redis]) -> None:
    handoff = Handoff(dbs["b1"], "b1", "animate.b1", 0.0)
    assert handoff.hold_lease("one", 5.0) and handoff.hold_lease("one", 5.0)
    assert not handoff.hold_lease("two", 5.0)
    handoff.release_lease("one")
    assert handoff.hold_lease("two", 5.0)


def test_a_full_region_spills_its_backlog_to_a_neighbour_with_room(
    servers: LocalFleet, dbs: dict[str, redis.Redis], tmp_path: object
) -> None:
    topology = Topology.from_mapping(
        {
            "regions": {
                name: {
                    "broker_url": region(servers, name).broker_url,
                    "latency_ms": {other: 20 for other in DBS if other != name},
                    "storage": {"backend": "local", "root": "/tmp/unused"},
                }
                for name in DBS
            }
        }
    )
    q = RegionQueue(topology.region("b1"), JobStore(dbs["b1"]), 0.0)
    for index in range(3):
        q.admit(record(f"b1.s{index}"), b"img", backlog=True)
    WorkerRegistry(dbs["b1"], "b1").beat("gpu0", {}, ttl_s=60, busy=True)  # full, not empty
    gpus(dbs["b2"], 2, "b2")
    scheduler = RegionScheduler(
        topology, "b1", SchedulerSettings(), AdmissionSettings(allowance=0.0)
    )

    class Table:
        def snapshot(self) -> object:
            return type("S", (), {"table": RoutingTable({"b1": {"b1": 1.0}}, {"b1": ["b2"]})})

    scheduler.routing = Table()  # type: ignore[assignment]
    moved, left = scheduler.pump()
    assert (moved, left) == (2, 1)
    assert dbs["b2"].llen("animate.b2") == 2
    home, there = JobStore(dbs["b1"]).get("b1.s0"), JobStore(dbs["b2"]).get("b1.s0")
    assert home.region == "b2" and there.region == "b2" and there.status is JobState.QUEUED
    assert JobStore(dbs["b2"]).input_image("b1.s0") == b"img"
    assert not dbs["b1"].exists("{animfleet}:input:b1.s0")  # the input moved with the job
    assert not dbs["b1"].zscore("{animfleet}:holding:b1", "b1.s0")
    assert dbs["b2"].zscore("{animfleet}:holding:b1", "b1.s0")  # still the home's demand
    assert Handoff(dbs["b1"], "b1", "animate.b1", 0.0).claims() == {}


def test_an_abandoned_spill_is_given_back(servers: LocalFleet, dbs: dict[str, redis.Redis]) -> None:
    q = RegionQueue(region(servers, "b1"), JobStore(dbs["b1"]), 0.0)
    q.admit(record("b1.z"), b"img", backlog=True)
    handoff = Handoff(dbs["b1"], "b1", "animate.b1", 0.0)
    taken = handoff.claim("b2", 5)
    assert taken.jobs == ["b1.z"] and q.script.backlog.depth() == 0
    assert not handoff.give_back("b1.z", "another claim's token")  # fenced: nothing changes
    assert q.script.backlog.depth() == 0
    assert handoff.give_back("b1.z", taken.token) and q.script.backlog.depth() == 1
    gpus(dbs["b1"], 1)
    assert handoff.move_home().jobs == ["b1.z"]


# -- a scheduler that stalls mid-spill past its claim time ----------------------------------------
def two_region_topology(servers: LocalFleet) -> Topology:
    return Topology.from_mapping(
        {
            "regions": {
                name: {
                    "broker_url": region(servers, name).broker_url,
                    "storage": {"backend": "local", "root": "/tmp/unused"},
                }
                for name in DBS
            }
        }
    )


def schedulers(servers: LocalFleet) -> tuple[RegionScheduler, RegionScheduler]:
    """The stalled one, and the one that takes over (any claim is past its time for it)."""
    topology = two_region_topology(servers)
    admission = AdmissionSettings(allowance=0.0)
    stalled = RegionScheduler(topology, "b1", SchedulerSettings(), admission, owner="stalled")
    quick = SchedulerSettings(claim_timeout_s=0.001)
    return stalled, RegionScheduler(topology, "b1", quick, admission, owner="next")


def where(dbs: dict[str, redis.Redis], job_id: str) -> list[str]:
    """The regions whose store holds ``job_id`` as a job (a pointer elsewhere does not count)."""
    found = []
    for name, client in dbs.items():
        raw = client.get(f"{{animfleet}}:job:{job_id}")
        if raw is not None and JobRecord.model_validate_json(raw).region == name:
            found.append(name)
    return found


def test_a_spill_stalled_before_its_copy_is_handed_back_and_makes_none(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    RegionQueue(region(servers, "b1"), JobStore(dbs["b1"]), 0.0).admit(
        record("b1.st"), b"img", backlog=True
    )
    gpus(dbs["b2"], 1, "b2")
    stalled, takeover = schedulers(servers)
    taken = stalled.handoff.claim("b2", 1)
    assert taken.jobs == ["b1.st"]
    time.sleep(0.01)

    takeover.recover_claims()  # no copy in b2: the claim is revoked there, the job handed back
    assert Backlog(dbs["b1"], "b1").contains("b1.st")
    assert stalled._move_abroad("b1.st", "b2", taken.token) == 0  # wakes up: fenced out

    assert not dbs["b2"].exists("{animfleet}:job:b1.st") and dbs["b2"].llen("animate.b2") == 0
    assert where(dbs, "b1.st") == ["b1"] and JobStore(dbs["b1"]).get("b1.st").region == "b1"
    gpus(dbs["b1"], 1)
    assert takeover.handoff.move_home().jobs == ["b1.st"]  # and it runs at home, once


def test_a_spill_stalled_after_its_copy_is_finished_once(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    RegionQueue(region(servers, "b1"), JobStore(dbs["b1"]), 0.0).admit(
        record("b1.sc"), b"img", backlog=True
    )
    gpus(dbs["b2"], 1, "b2")
    stalled, takeover = schedulers(servers)
    taken = stalled.handoff.claim("b2", 1)
    copy = JobStore(dbs["b1"]).get("b1.sc").model_copy(update={"region": "b2"})
    answer = stalled.queue("b2").admit(
        copy,
        b"img",
        idempotency=[JobStore.idempotency_slot(spill_slot("b1.sc", taken.token))],
        idempotency_entry=JobStore.idempotency_entry("b1.sc", "b2", "spill-copy"),
    )
    assert (
        answer.outcome == AdmissionOutcome.ADMITTED
    )  # the copy is made, then the scheduler stalls
    time.sleep(0.01)

    takeover.recover_claims()  # the copy holds the claim's slot: the move is finished
    assert JobStore(dbs["b1"]).get("b1.sc").region == "b2"
    forwarded, status = stalled.handoff.forward("b1.sc", "b1", "b2", taken.token)
    assert (forwarded, status) == (False, "reclaimed")
    assert stalled._move_abroad("b1.sc", "b2", taken.token) == 0

    assert where(dbs, "b1.sc") == ["b2"] and dbs["b2"].llen("animate.b2") == 1
    assert not Backlog(dbs["b1"], "b1").contains("b1.sc")


def test_a_stale_token_never_forwards_a_newer_claim(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    RegionQueue(region(servers, "b1"), JobStore(dbs["b1"]), 0.0).admit(
        record("b1.re"), b"img", backlog=True
    )
    handoff = Handoff(dbs["b1"], "b1", "animate.b1", 0.0)
    first = handoff.claim("b2", 1)
    assert handoff.give_back("b1.re", first.token)
    second = handoff.claim("b2", 1)
    assert second.jobs == ["b1.re"] and second.token != first.token

    assert handoff.forward("b1.re", "b1", "b2", first.token) == (False, "reclaimed")
    assert handoff.claims()["b1.re"].token == second.token  # the newer claim still stands
    assert JobStore(dbs["b1"]).get("b1.re").region == "b1"


def test_a_region_without_workers_spills_into_a_busy_neighbours_backlog(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    q = RegionQueue(region(servers, "b1"), JobStore(dbs["b1"]), 0.0)
    for index in range(3):
        q.admit(record(f"b1.w{index}"), b"img", backlog=True)
    WorkerRegistry(dbs["b2"], "b2").beat("gpu0", {}, ttl_s=60, busy=True)
    JobStore(dbs["b2"]).redis.zadd("{animfleet}:queued:b2", {"b2.own": time.time()})  # b2 is full
    scheduler, _ = schedulers(servers)

    class Table:
        def snapshot(self) -> object:
            return type("S", (), {"table": RoutingTable({"b1": {"b1": 1.0}}, {"b1": ["b2"]})})

    scheduler.routing = Table()  # type: ignore[assignment]
    assert scheduler.pump() == (3, 0)  # b1 has no live worker: its backlog waits in b2's
    assert Backlog(dbs["b2"], "b2").depth() == 3 and dbs["b2"].llen("animate.b2") == 0
    for index in range(3):
        assert where(dbs, f"b1.w{index}") == ["b2"]
    # With a (busy) worker back home, a full neighbour takes nothing more: the job waits here.
    WorkerRegistry(dbs["b1"], "b1").beat("gpu0", {}, ttl_s=60, busy=True)
    assert q.admit(record("b1.w3"), b"img", backlog=True).outcome == AdmissionOutcome.BACKLOGGED
    assert scheduler.pump() == (0, 1) and Backlog(dbs["b2"], "b2").depth() == 3
