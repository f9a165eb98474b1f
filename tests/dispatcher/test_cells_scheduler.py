"""The scheduler spills a full cell's backlog to its sibling cells before any other region."""

from __future__ import annotations

import time

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord
from animfleet.region.jobstore import JobStore
from animfleet.region.keys import ROUTING_KEY
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Topology
from dispatcher.admission import AdmissionSettings, RegionQueue, RoutingCache
from dispatcher.router import table_document
from dispatcher.routing import RoutingTable
from dispatcher.scheduler import RegionScheduler, SchedulerSettings
from launcher.local_fleet import LocalFleet
from tests.conftest import EmptyDbs

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)
DBS = {"ue-c1": 10, "ue-c2": 11, "near": 12}


@pytest.fixture
def dbs(empty_dbs: EmptyDbs) -> dict[str, redis.Redis]:
    return empty_dbs(DBS)


def topology(servers: LocalFleet) -> Topology:
    url = f"redis://127.0.0.1:{servers.redis_port}/"
    storage = {"backend": "local", "root": "/tmp/unused"}
    return Topology.from_mapping(
        {
            "regions": {
                "ue": {"cells": 2, "latency_ms": {"near": 5}, "storage": storage},
                "ue-c1": {"broker_url": url + str(DBS["ue-c1"])},
                "ue-c2": {"broker_url": url + str(DBS["ue-c2"])},
                "near": {"broker_url": url + str(DBS["near"]), "storage": storage},
            }
        },
        env={},
    )


def full_cell(
    servers: LocalFleet, dbs: dict[str, redis.Redis], sibling_gpus: int
) -> RegionScheduler:
    """Cell ue-c1 full with 3 jobs in its backlog, its sibling with ``sibling_gpus`` idle GPUs,
    the other region with 2; the cell's scheduler."""
    fleet = topology(servers)
    cell = RegionQueue(fleet.region("ue-c1"), JobStore(dbs["ue-c1"]), 0.0)
    for index in range(3):
        job = JobRecord(id=f"ue-c1.s{index}", region="ue-c1", home_region="ue-c1", params=PARAMS)
        cell.admit(job, b"img", backlog=True)
    WorkerRegistry(dbs["ue-c1"], "ue-c1").beat("gpu0", {}, ttl_s=60, busy=True)  # full
    for region, count in (("ue-c2", sibling_gpus), ("near", 2)):
        for index in range(count):
            WorkerRegistry(dbs[region], region).beat(f"gpu{index}", {}, ttl_s=60, busy=False)
    return RegionScheduler(fleet, "ue-c1", SchedulerSettings(), AdmissionSettings(allowance=0))


def test_siblings_take_a_full_cells_backlog_first_then_the_table_regions(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    scheduler = full_cell(servers, dbs, sibling_gpus=2)
    table = RoutingTable(
        {"ue-c1": {"ue-c1": 0.5, "near": 0.5}}, {"ue-c1": ["near"]}, computed_at=time.time()
    )
    dbs["ue-c1"].set(ROUTING_KEY, table_document(table, {}))  # as the router writes it
    scheduler.routing = RoutingCache(dbs["ue-c1"], scheduler.topology.names)
    scheduler.routing.refresh()
    assert scheduler.pump() == (3, 0)
    assert dbs["ue-c2"].llen("animate.ue-c2") == 2  # the sibling filled first
    assert dbs["near"].llen("animate.near") == 1  # the rest crossed to the other region


def test_a_cell_spills_to_its_sibling_without_a_routing_table(
    servers: LocalFleet, dbs: dict[str, redis.Redis]
) -> None:
    scheduler = full_cell(servers, dbs, sibling_gpus=1)
    assert scheduler.pump() == (1, 2)  # one to the sibling; no table, no other region
    assert dbs["ue-c2"].llen("animate.ue-c2") == 1
    assert JobStore(dbs["ue-c1"]).get("ue-c1.s0").region == "ue-c2"
    assert dbs["near"].llen("animate.near") == 0
