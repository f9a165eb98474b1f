"""No orphan anywhere: a region emptied of workers with a backlog, a scheduler frozen mid-spill
past its claim time, and the sweeper process killed while a worker dies mid-job."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobRecord, JobState
from animfleet.region.keys import BACKLOG_ALL, BACKLOG_MOVING, JOB_KEY, SCHEDULER_LEASE
from animfleet.region.store_client import store_client
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
ORPHAN_AFTER_S = 3.0
FAST_SERVICES = {  # a region without workers may keep its jobs a minute: only spills move them
    "ANIMFLEET_SWEEPER_ORPHAN_AFTER_S": "60",
    "ANIMFLEET_SWEEPER_LEASE_S": "1",
    "ANIMFLEET_SWEEPER_POLL_S": "0.2",
    "ANIMFLEET_SCHEDULER_LEASE_S": "1",
    "ANIMFLEET_SCHEDULER_CLAIM_TIMEOUT_S": "2",
}


def empty_region(fleet: LocalFleet, region: str) -> float:
    """SIGKILL every worker of ``region``; returns when none is live any more (monotonic)."""
    for name in [n for n in fleet.processes if n.startswith(f"worker-{region}-")]:
        fleet.kill_process(name)
    wait_until(lambda: not fleet.heartbeats(region), f"{region} without live workers", 15)
    return time.monotonic()


def holders(fleet: LocalFleet, region: str) -> dict[str, int]:
    """Each job of ``region``'s home: the regions whose store holds it as a job (not a pointer)."""
    found: dict[str, int] = {}
    for name in fleet.regions:
        client = store_client(fleet.store_url(name))
        for key in client.scan_iter(f"{JOB_KEY}{region}.*"):
            record = JobRecord.model_validate_json(client.get(key) or b"{}")
            if record.region == name:
                found[record.id] = found.get(record.id, 0) + 1
    return found


def test_a_region_emptied_with_a_backlog_spills_it_to_its_ring(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        regions=("sa", "sb"),
        workers_per_region=1,
        model_dir=standin(0.3),
        router_period_s=0.5,
        service_env=FAST_SERVICES,
    )
    client = make_client(fleet)
    emptied = empty_region(fleet, "sa")
    # The neighbour is busy with a backlog of its own: sa's jobs still go there, to wait in it.
    own = [client.submit(make_image(seed=i), "sway", home_region="sb").id for i in range(6)]
    sb = store_client(fleet.store_url("sb"))
    assert sb.zcard(BACKLOG_ALL + "sb")
    jobs = [client.submit(make_image(seed=i), "pan left", home_region="sa").id for i in range(8)]
    sa = store_client(fleet.store_url("sa"))

    records = settle(fleet, own + jobs, timeout=90)
    recovered_s = time.monotonic() - emptied
    # Every job ran once, on the neighbour; none waited for the orphan limit to end it.
    assert all(r.status is JobState.SUCCEEDED and r.attempts == 1 for r in records.values())
    assert {record.region for record in records.values()} == {"sb"}
    assert sa.zcard(BACKLOG_ALL + "sa") == 0
    assert set(holders(fleet, "sa").values()) == {1}
    report_case("region emptied, backlog spilled to its ring", fleet, records, recovered_s)


def test_a_region_emptied_with_no_ring_ends_its_backlog_no_capacity(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    orphans = {**FAST_SERVICES, "ANIMFLEET_SWEEPER_ORPHAN_AFTER_S": str(ORPHAN_AFTER_S)}
    fleet = make_fleet(workers_per_region=1, model_dir=standin(0.3), service_env=orphans)
    client = make_client(fleet)
    empty_region(fleet, "fa")
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    submitted = time.monotonic()
    fa = store_client(fleet.store_url("fa"))
    assert fa.zcard(BACKLOG_ALL + "fa") == len(jobs)  # admitted to the backlog, no GPU anywhere

    records = settle(fleet, jobs, timeout=30)
    recovered_s = time.monotonic() - submitted
    for record in records.values():
        assert record.status is JobState.EXPIRED, record
        assert record.error is not None and record.error.code == "no_capacity"
    assert fa.zcard(BACKLOG_ALL + "fa") == 0
    # The orphan limit counts from the last worker's lapse, plus a pass or two.
    assert recovered_s < ORPHAN_AFTER_S + 3.0
    report_case("region emptied, no ring: backlog ends no_capacity", fleet, records, recovered_s)


def test_a_scheduler_frozen_mid_spill_past_its_claim_runs_each_job_in_one_region(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        regions=("sa", "sb"),
        workers_per_region=1,
        model_dir=standin(0.1, 0.05),
        router_period_s=0.5,
        service_env=FAST_SERVICES,
    )
    fleet.start_scheduler("scheduler-2")
    client = make_client(fleet)
    empty_region(fleet, "sa")  # its backlog spills in one claim per pass: a wide window
    sa = store_client(fleet.store_url("sa"))
    pids = {fleet.processes[n].pid: n for n in ("scheduler", "scheduler-2")}
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    jobs = [client.submit(make_image(seed=i), "sway", home_region="sa").id for i in range(24)]
    assert sa.zcard(BACKLOG_ALL + "sa") >= 10
    # Let one scheduler go, and freeze it again as soon as it holds claims.
    wait_until(lambda: sa.get(SCHEDULER_LEASE + "sa") is None, "the old lease to lapse", 5)
    first = next(iter(pids))
    os.kill(first, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while not sa.hlen(BACKLOG_MOVING + "sa"):
        assert time.monotonic() < deadline, "the scheduler never claimed a spill"
        time.sleep(0.0005)
    os.kill(first, signal.SIGSTOP)
    frozen = time.monotonic()
    assert sa.hlen(BACKLOG_MOVING + "sa"), "frozen mid-spill"
    (second,) = set(pids) - {first}
    os.kill(second, signal.SIGCONT)  # takes the lease, then the claims once they are 2 s old
    wait_until(lambda: not sa.hlen(BACKLOG_MOVING + "sa"), "the claims recovered", 20)
    recovered_s = time.monotonic() - frozen
    os.kill(first, signal.SIGCONT)  # wakes mid-spill with claims that are no longer its own

    records = settle(fleet, jobs, timeout=120)
    assert all(r.status is JobState.SUCCEEDED and r.attempts == 1 for r in records.values())
    assert set(holders(fleet, "sa").values()) == {1}, holders(fleet, "sa")
    report_case("scheduler frozen mid-spill past its claim", fleet, records, recovered_s)


def test_a_killed_sweeper_is_covered_by_its_other_copy_when_a_worker_dies(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(workers_per_region=2, model_dir=standin(3.0), service_env=FAST_SERVICES)
    fleet.start_sweeper("sweeper-2")
    for name in ("sweeper", "sweeper-2"):
        log = fleet.root / "logs" / f"{name}.log"
        wait_until(lambda log=log: "sweeper.started" in log.read_text(), f"{name} up", 60)
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    victim_job = jobs[0]
    victim = running_on(fleet, victim_job)
    by_pid = {fleet.processes[n].pid: n for n in ("sweeper", "sweeper-2")}
    wait_until(lambda: fleet.sweeping("fa") is not None, "a sweeper holding the lease", 10)
    holder = by_pid[int(str(fleet.sweeping("fa")).split(":")[1])]
    fleet.kill_process(holder)  # the sweeper holding the lease dies first ...
    fleet.kill_process(victim)  # ... then a worker, mid-job
    killed = time.monotonic()

    def restarted() -> bool:
        record = record_of(fleet, victim_job)
        return record.attempts == 2 or record.status.terminal

    wait_until(restarted, f"{victim_job} running again", timeout=3 * HEARTBEAT_TTL_S)
    recovered_s = time.monotonic() - killed
    records = settle(fleet, jobs, timeout=120)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    assert records[victim_job].attempts == 2
    report_case("sweeper SIGKILL, then a worker mid-job", fleet, records, recovered_s)
