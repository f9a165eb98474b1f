"""Spillover from a backlog: a full region's waiting jobs run on a neighbour with room.

Two regions with one worker each (the model stand-in), a router and the scheduler. Jobs of
home ``sa`` beyond what the two GPUs hold wait in ``sa``'s backlog; the scheduler moves them
home or, while ``sb`` has room and no backlog of its own, to ``sb``, where they run under their
original id; reads and cancels follow the job there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from animfleet.jobs import JobState
from animfleet.region.jobstore import JobStore
from animfleet.region.keys import JOB_KEY
from animfleet.region.store_client import store_client
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.fixtures.standin import ANIMATOR as STANDIN


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("spill-fleet"),
        regions=("sa", "sb"),
        storage="local",
        workers_per_region=1,
        model_dir=Path("standin:0.3:0.1"),
        animator=STANDIN,
        router_period_s=0.5,
        service_env={"ANIMFLEET_ADMISSION_ALLOWANCE": "0"},
    ) as running:
        yield running


def wait_until(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.1)


def test_a_full_regions_backlog_drains_into_its_neighbour(
    fleet: LocalFleet, make_image: Callable[..., bytes]
) -> None:
    client = Client(fleet.topology, routing_region="sa")
    try:
        wait_until(lambda: client.routing.snapshot().live.get("sb", 0) == 1, "a routing table")
        jobs = [
            client.submit(make_image(32, 32), "sway", home_region="sa", frames=2, width=32,
                          height=32)
            for _ in range(12)
        ]  # fmt: skip
        backlogged = [job for job in jobs if job.region == "sa"]
        wait_until(lambda: all(job.get().status.terminal for job in jobs), "all jobs end")
        records = {job.id: job.get() for job in jobs}
        assert {record.status for record in records.values()} == {JobState.SUCCEEDED}
        moved = [job for job in backlogged if records[job.id].region == "sb"]
        assert moved, "no backlog job ran on the neighbour"
        home = JobStore(store_client(fleet.store_url("sa")))
        for job in moved:  # the home keeps a pointer; the neighbour ran it under the same id
            assert job.id.startswith("sa.") and home.get(job.id).region == "sb"
            assert store_client(fleet.store_url("sb")).exists(JOB_KEY + job.id)
        print(f"\n{len(moved)} of {len(backlogged)} backlog jobs of sa ran on sb")
    finally:
        client.close()
