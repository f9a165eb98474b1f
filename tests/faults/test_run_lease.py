"""A job's liveness is its own run's lease: a pool child killed while a peer is idle strands
nothing, and a duplicated delivery racing a stalled run never completes the job twice."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from animfleet.region.broker import BrokerLink
from animfleet.region.messages import AnimateMessages
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

HEARTBEAT_TTL_S = 5.0  # what workers publish (workers/heartbeat.py), the run lease's TTL too


def succeeded_in_log(fleet: LocalFleet, worker: str, job_id: str) -> bool:
    """Whether ``worker``'s log shows a run of ``job_id`` ending ``succeeded``."""
    for line in (fleet.root / "logs" / f"{worker}.log").read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (entry.get("event"), entry.get("job_id"), entry.get("status")) == (
            "job.transition",
            job_id,
            "succeeded",
        ):
            return True
    return False


def pool_child_of(fleet: LocalFleet, job_id: str) -> int:
    beat = next(b for b in fleet.heartbeats("fa") if b["job_id"] == job_id)
    return int(str(beat["pid"]))


def test_pool_child_sigkill_with_an_idle_peer_strands_nothing(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # Celery hands the message back at once; the peer (or the worker's next pool child) gets
    # it while the dead run's lease is still live, and defers it instead of acking it away.
    # The next pool child heartbeats under the dead one's worker name: only the job's own run
    # lease says the run is gone.
    fleet = make_fleet(workers_per_region=2, model_dir=standin(3.0), webhooks=True)
    client = make_client(fleet)
    job = client.submit(make_image(seed=1), "pan left").id  # one job: the peer stays idle
    running_on(fleet, job)
    os.kill(pool_child_of(fleet, job), signal.SIGKILL)
    killed = time.monotonic()

    def restarted() -> bool:
        record = record_of(fleet, job)
        return record.attempts == 2 or record.status.terminal

    wait_until(restarted, f"{job} running again", timeout=3 * HEARTBEAT_TTL_S)
    recovered_s = time.monotonic() - killed
    records = settle(fleet, [job], timeout=60)
    assert records[job].status is JobState.SUCCEEDED, records[job]
    assert records[job].attempts == 2
    report_case("pool child SIGKILL, idle peer", fleet, records, recovered_s=recovered_s)


def test_a_duplicated_delivery_racing_a_stalled_run_completes_the_job_once(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # The run stalls past its lease (SIGSTOP: a pause, a partition) while a second delivery
    # of its job arrives (a requeue racing the broker's own redelivery): both deliveries start;
    # the second run's writes win, the stalled run's are refused once it resumes.
    fleet = make_fleet(workers_per_region=2, model_dir=standin(4.0))
    client = make_client(fleet)
    job = client.submit(make_image(seed=2), "pan left").id
    first = running_on(fleet, job)
    stalled = pool_child_of(fleet, job)
    os.kill(stalled, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        region = fleet.topology.region("fa")
        broker = BrokerLink(region)  # the fleet's broker: its Redis, or RabbitMQ
        broker.publish(region.queue, AnimateMessages(region).for_job(job))  # the duplicate
        broker.close()

        def taken_over() -> bool:
            return record_of(fleet, job).attempts == 2

        wait_until(taken_over, f"{job} taken over", timeout=3 * HEARTBEAT_TTL_S)
        recovered_s = time.monotonic() - stopped
    finally:
        os.kill(stalled, signal.SIGCONT)
    second = str(record_of(fleet, job).worker)
    assert second != first

    log = fleet.root / "logs" / f"{first}.log"
    wait_until(lambda: "job.fenced" in log.read_text(), f"{first} fenced off", timeout=30)
    records = settle(fleet, [job], timeout=60)  # one output object, the one the record names
    assert records[job].status is JobState.SUCCEEDED, records[job]
    assert records[job].attempts == 2 and records[job].worker == second
    # The winner logs its success just after its write: wait for the line, then count.
    wait_until(lambda: succeeded_in_log(fleet, second, job), f"{second} logged it", timeout=30)
    finished = [name for name in (first, second) if succeeded_in_log(fleet, name, job)]
    assert finished == [second], finished  # 0 runs twice to completion
    report_case("duplicate delivery racing a stalled run", fleet, records, recovered_s=recovered_s)
