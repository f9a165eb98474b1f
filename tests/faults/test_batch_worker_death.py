"""A batch worker host dies with jobs in several slots: every one of them ends once, elsewhere."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import record_of, report_case, settle, standin, wait_until

pytestmark = pytest.mark.faults

HEARTBEAT_TTL_S = 5.0  # what workers publish (workers/heartbeat.py)


def test_batch_worker_sigkill_requeues_the_job_of_every_slot_and_nothing_is_lost(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        workers_per_region=1,
        model_dir=standin(3.0),
        webhooks=True,  # its sweeper is its own process, started with the workers
        worker_env={"ANIMFLEET_WORKER_BATCH": "3"},
    )
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(3)]

    def all_running() -> bool:
        return all(record_of(fleet, job).status is JobState.RUNNING for job in jobs)

    wait_until(all_running, "three jobs running in three slots", timeout=60)
    slots = {record_of(fleet, job).worker for job in jobs}
    assert slots == {f"worker-fa-0/{n}" for n in range(3)}
    fleet.kill_process("worker-fa-0")
    killed = time.monotonic()
    fleet.start_worker("fa", 1)

    def requeued() -> bool:
        return all(record_of(fleet, job).attempts == 2 for job in jobs)

    wait_until(requeued, "every slot's job running again", timeout=60)
    recovered_s = time.monotonic() - killed
    records = settle(fleet, jobs, timeout=150)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    assert all(str(r.worker).startswith("worker-fa-1/") for r in records.values())
    report_case("batch worker SIGKILL, 3 slots busy", fleet, records, recovered_s=recovered_s)
