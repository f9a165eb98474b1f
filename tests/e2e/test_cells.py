"""A region split into two cells, each its own redis-server, worker, scheduler and sweeper.

Jobs of two tenants land in their own cells (their home, by rendezvous hash of the tenant); a
job that finds its cell full goes to the sibling cell; every job completes, and a lookup by id
(or by a client-chosen id) and the tenant's listing find each one across the cells.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from animfleet.jobs import JobState
from animfleet.region.keys import JOB_KEY
from dispatcher import Client
from dispatcher.client import JobHandle
from dispatcher.tenancy import Tenancy
from launcher.local_fleet import LocalFleet
from tests.fixtures.standin import ANIMATOR as STANDIN

C1, C2 = "ue-c1", "ue-c2"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("cells-fleet"),
        regions=("ue",),
        cells={"ue": 2},
        storage="local",
        workers_per_region=1,
        model_dir=Path("standin:2.0:0"),  # long enough that a second job finds its cell full
        animator=STANDIN,
        service_env={"ANIMFLEET_ADMISSION_ALLOWANCE": "0"},
    ) as running:
        yield running


def test_tenants_keep_their_cells_and_a_full_cell_spills_to_its_sibling(
    fleet: LocalFleet, make_image: Callable[..., bytes]
) -> None:
    topology = fleet.topology
    assert topology.cells_of("ue") == [C1, C2]
    assert fleet.redis_url(C1) != fleet.redis_url(C2)  # two redis-server processes
    tenants = [f"tenant-{index}" for index in range(50)]
    first = next(t for t in tenants if topology.cell_for("ue", t) == C1)
    second = next(t for t in tenants if topology.cell_for("ue", t) == C2)
    client = Client(topology, admission=None)
    try:

        def submit(tenant: str, job_id: str | None = None) -> JobHandle:
            return client.submit(
                make_image(32, 32), "sway", home_region="ue", tenant=tenant, frames=2,
                width=32, height=32, job_id=job_id,
            )  # fmt: skip

        one = submit(first, job_id="cells-first-1")  # takes c1's only GPU
        spilled = submit(first)  # c1 full: its sibling c2 has room
        other = submit(second)  # c2 full now, and so is c1: waits in its own cell's backlog
        jobs = [one, spilled, other]
        assert [job.region for job in jobs] == [C1, C2, C2]
        assert [job.record and job.record.home_region for job in jobs] == [C1, C1, C2]
        assert spilled.id.startswith(f"{C2}.") and other.id.startswith(f"{C2}.")

        reader = Client(topology)  # a lookup from another dispatcher, by id alone
        try:
            ids = [job.id for job in jobs]
            records = [reader.wait(job_id, timeout=120) for job_id in ids]
            assert {record.status for record in records} == {JobState.SUCCEEDED}
            assert reader.get("cells-first-1").region == C1
            for record in records:  # each record lives in the store of the cell that ran it
                cell = redis.Redis.from_url(fleet.redis_url(record.region))
                assert cell.exists(JOB_KEY + record.id)
            listed = Tenancy(reader, C2).list_jobs(first).jobs
            assert {record.id for record in listed} == {ids[0], ids[1]}
            region = reader.region_status("ue")
            assert region.load.live_workers == 2  # the two cells' workers, summed
        finally:
            reader.close()
    finally:
        client.close()
