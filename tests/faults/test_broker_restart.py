"""The region's Redis (broker and job store) restarts with persistence while jobs are queued
and running: every job still ends, once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from tests.faults.conftest import running_on, settle, standin
from tools.localfleet import LocalFleet

pytestmark = pytest.mark.faults


def test_redis_restart_with_jobs_queued_and_running_loses_nothing(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(workers_per_region=2, model_dir=standin(3.0), redis_persistence=True)
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    running_on(fleet, jobs[0])  # two running (mid-job), two queued

    fleet.restart_redis(down_s=3.0)  # the running jobs' record writes fail meanwhile

    records = settle(fleet, jobs, timeout=150)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), {
        j: (r.status.value, r.error) for j, r in records.items()
    }
