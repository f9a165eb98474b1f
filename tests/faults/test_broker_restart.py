"""The region's Redis (broker and job store) restarts with persistence while jobs are queued
and running: every job still ends, once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import report_case, running_on, settle, standin

pytestmark = pytest.mark.faults


def test_redis_restart_with_jobs_queued_and_running_loses_nothing(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # The embedded fleet's own Redis settings (append-only file, fsync every second).
    fleet = make_fleet(workers_per_region=2, model_dir=standin(3.0))
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    running_on(fleet, jobs[0])  # two running (mid-job), two queued

    fleet.restart_redis(down_s=3.0)  # the running jobs' record writes fail meanwhile

    records = settle(fleet, jobs, timeout=150)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), {
        j: (r.status.value, r.error) for j, r in records.items()
    }
    report_case("Redis restarted, 3 s down", fleet, records, recovered_s=None)


def test_a_10s_broker_outage_during_a_job_loses_no_gpu_work(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # The sweeper process runs too: lapses seen right after Redis returns must
    # not requeue a job whose worker is still running it.
    fleet = make_fleet(workers_per_region=1, model_dir=standin(8.0, jitter=0.0), webhooks=True)
    client = make_client(fleet)
    job = client.submit(make_image(), "pan left").id
    running_on(fleet, job)

    fleet.restart_redis(down_s=10.0)

    records = settle(fleet, [job], timeout=120)
    assert records[job].status is JobState.SUCCEEDED, records[job]
    assert records[job].attempts == 1  # ran once, through the outage: no GPU work thrown away
    report_case("broker down 10 s mid-job", fleet, records, recovered_s=None)
