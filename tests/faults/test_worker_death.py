"""A worker dies or is stopped mid-job: the job still ends once, with one output."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import (
    record_of,
    report_case,
    running_on,
    settle,
    standin,
    wait_until,
)

pytestmark = pytest.mark.faults

HEARTBEAT_TTL_S = 5.0  # what workers publish (workers/heartbeat.py)


def test_worker_host_sigkill_mid_job_is_redelivered_and_nothing_is_lost(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # The whole worker (main process and pool child) dies, as when its host is lost: nobody
    # rejects the message, which waits in Redis' unacked set until the visibility timeout (30 s
    # here, 15 min by default). The sweeper requeues the job once the worker's heartbeat lapses.
    fleet = make_fleet(workers_per_region=2, model_dir=standin(2.0), webhooks=True)
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    victim_job = jobs[0]
    victim = running_on(fleet, victim_job)
    fleet.kill_process(victim)
    killed = time.monotonic()

    def restarted() -> bool:
        record = record_of(fleet, victim_job)
        return record.attempts == 2 or record.status.terminal

    wait_until(restarted, f"{victim_job} running again", timeout=3 * HEARTBEAT_TTL_S)
    recovered_s = time.monotonic() - killed
    records = settle(fleet, jobs, timeout=150)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    assert records[victim_job].attempts == 2
    assert records[victim_job].worker != victim
    report_case("worker host SIGKILL mid-job", fleet, records, recovered_s=recovered_s)


def test_worker_pool_child_sigkill_mid_job_is_redelivered(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # Only the process running the job dies (an OOM kill): Celery puts the message back at once.
    fleet = make_fleet(workers_per_region=1, model_dir=standin(2.0))
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(2)]
    running_on(fleet, jobs[0])
    beat = next(b for b in fleet.heartbeats("fa") if b["job_id"] == jobs[0])
    os.kill(int(str(beat["pid"])), signal.SIGKILL)

    records = settle(fleet, jobs, timeout=120)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    assert records[jobs[0]].attempts == 2


def test_worker_sigterm_finishes_the_running_job_then_exits(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(workers_per_region=2, model_dir=standin(3.0))
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "zoom in").id for i in range(4)]
    worker = running_on(fleet, jobs[0])
    process = fleet.processes[worker]
    fleet.signal_worker(worker, signal.SIGTERM)  # warm shutdown, as a supervisor stops it
    # It leaves the capacity count at once, not when its job ends or its heartbeat lapses.
    signaled = time.monotonic()
    wait_until(lambda: worker not in live_names(fleet), f"{worker} left the count", timeout=10)
    left_after = time.monotonic() - signaled
    assert process.poll() is None, "it still finishes its job"
    later = [client.submit(make_image(seed=i), "zoom in").id for i in range(4, 6)]

    wait_until(lambda: process.poll() is not None, f"{worker} exited", timeout=60)
    assert process.returncode == 0
    records = settle(fleet, jobs + later, timeout=120)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    # The job it was running when told to stop finished there, once.
    assert records[jobs[0]].attempts == 1
    assert records[jobs[0]].worker == worker
    # Nothing submitted after SIGTERM was admitted to the draining worker.
    assert all(records[job].worker != worker for job in later), records
    report_case("SIGTERM: draining worker", fleet, records, recovered_s=left_after)


def live_names(fleet: LocalFleet) -> set[str]:
    return {str(beat["worker"]) for beat in fleet.heartbeats("fa")}
