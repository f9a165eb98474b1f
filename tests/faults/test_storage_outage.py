"""Object storage is unreachable for 30 s while jobs upload: uploads retry with backoff and the
jobs succeed; a job whose upload cannot get through within its retry window fails clearly."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import record_of, running_on, settle, standin, wait_until

pytestmark = pytest.mark.faults

OUTAGE_S = 30.0


def test_uploads_ride_out_a_30s_storage_outage(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # The production retry window (ANIMFLEET_WORKER_UPLOAD_RETRY_S, 60 s) covers the outage.
    fleet = make_fleet(
        workers_per_region=2,
        model_dir=standin(1.5),
        storage="s3",
        worker_env={  # the fault tests' 20 s soft limit would end the job during its retries
            "ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S": "100",
            "ANIMFLEET_WORKER_HARD_TIME_LIMIT_S": "110",
            "ANIMFLEET_WORKER_VISIBILITY_TIMEOUT_S": "120",
            "ANIMFLEET_WORKER_UPLOAD_RETRY_S": "60",
        },
    )
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(2)]
    running_on(fleet, jobs[0])
    fleet.stop_seaweedfs()
    outage_ends = time.monotonic() + OUTAGE_S
    jobs += [client.submit(make_image(seed=i), "pan left").id for i in range(2, 4)]
    time.sleep(max(0.0, outage_ends - time.monotonic()))
    fleet.start_seaweedfs()

    records = settle(fleet, jobs, timeout=150)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), {
        j: (r.status.value, r.error) for j, r in records.items()
    }
    # The first jobs finished inference during the outage and waited in upload retries.
    assert max(r.metrics.upload_time or 0.0 for r in records.values()) > OUTAGE_S / 2


def test_upload_fails_clearly_when_storage_stays_down_past_the_retry_window(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        workers_per_region=1,
        model_dir=standin(0.5),
        storage="s3",
        worker_env={"ANIMFLEET_WORKER_UPLOAD_RETRY_S": "5"},
    )
    client = make_client(fleet)
    fleet.stop_seaweedfs()
    job = client.submit(make_image(), "pan left").id
    wait_until(lambda: record_of(fleet, job).status.terminal, f"{job} terminal", timeout=60)
    fleet.start_seaweedfs()  # to list the outputs; and the worker serves again
    later = client.submit(make_image(), "pan left").id
    records = settle(fleet, [job, later], timeout=60)
    assert records[job].status is JobState.FAILED
    assert records[job].error is not None and records[job].error.code == "storage_unavailable"
    assert records[later].status is JobState.SUCCEEDED
