"""A worker's own threads fail: its heartbeat raises something that is not a store error, or a
batch slot hangs. The worker keeps its runs' leases through the one, and stops (for its
supervisor to start it again) on the other; no job loops requeue -> fenced -> worker_lost."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import record_of, report_case, settle, standin, wait_until
from tests.fixtures.faulty_standins import (
    FLAKY_HOLDINGS,
    HANG_FILE_ENV,
    HANGING,
    HOLDINGS_FAULTS_ENV,
)
from workers.heartbeat import EXIT_HEARTBEAT_LOST

pytestmark = pytest.mark.faults

HEARTBEAT_TTL_S = 5.0  # what workers publish (workers/heartbeat.py), the run lease's TTL too


def log_events(fleet: LocalFleet, process: str, event: str) -> list[dict[str, object]]:
    found = []
    for line in (fleet.root / "logs" / f"{process}.log").read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            found.append(entry)
    return found


def test_an_exception_in_the_heartbeat_keeps_every_run_alive(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # Each job spends 2 TTLs preparing its (cold) image before its first step, so only the
    # heartbeat renews its lease meanwhile: a dead heartbeat thread lets it lapse mid-job.
    fleet = make_fleet(
        workers_per_region=1,
        model_dir=Path(f"standin:0.5:0.0:48:{2 * HEARTBEAT_TTL_S}:8"),
        animator=FLAKY_HOLDINGS,
        worker_env={HOLDINGS_FAULTS_ENV: "3"},  # three beats in a row raise ValueError
    )
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(2)]
    records = settle(fleet, jobs, timeout=90)

    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    assert [r.attempts for r in records.values()] == [1, 1]  # never requeued, never fenced
    assert log_events(fleet, "worker-fa-0", "heartbeat.beat_failed")  # the fault did happen
    (recovered,) = log_events(fleet, "worker-fa-0", "heartbeat.recovered")
    assert recovered["failures"] == 3
    failing_s = float(str(recovered["failing_s"]))
    report_case("heartbeat raises ValueError 3 beats", fleet, records, recovered_s=failing_s)


# A batch worker whose time limits are short: a hung slot is found within seconds.
HUNG_LIMITS = {
    "ANIMFLEET_WORKER_BATCH": "2",
    "ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S": "4",
    "ANIMFLEET_WORKER_HARD_TIME_LIMIT_S": "6",
    "ANIMFLEET_WORKER_UPLOAD_RETRY_S": "3",
}


def test_a_hung_batch_slot_ends_its_job_and_its_worker_starts_again(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
    tmp_path: Path,
) -> None:
    hang = tmp_path / "hang"
    fleet = make_fleet(
        workers_per_region=2,
        model_dir=standin(1.0),
        animator=HANGING,
        worker_env={**HUNG_LIMITS, HANG_FILE_ENV: str(hang)},
        service_env={
            "ANIMFLEET_SWEEPER_HARD_TIME_LIMIT_S": HUNG_LIMITS["ANIMFLEET_WORKER_HARD_TIME_LIMIT_S"]
        },
    )
    client = make_client(fleet)
    hung = client.submit(make_image(seed=1), "pan left").id
    wait_until(hang.exists, "a slot hung", timeout=60)
    slot = record_of(fleet, hung).worker
    assert slot is not None
    worker = slot.partition("/")[0]
    process = fleet.processes[worker]
    # The heartbeat stops renewing the hung run one TTL past the hard limit, and the worker.
    wait_until(lambda: process.poll() is not None, f"{worker} stopped", timeout=40)
    stopped = time.monotonic()
    assert process.returncode == EXIT_HEARTBEAT_LOST

    def taken_over() -> bool:
        record = record_of(fleet, hung)
        return record.attempts == 2 or record.status.terminal

    wait_until(taken_over, f"{hung} taken over", timeout=3 * HEARTBEAT_TTL_S)
    recovered_s = time.monotonic() - stopped
    # As its supervisor would: the stopped worker starts again and serves jobs.
    fleet.start_worker("fa", int(worker.rsplit("-", 1)[1]))
    fleet.wait_for_workers({"fa": 4}, timeout=240)  # two slots each; a cold boot is slow
    jobs = [hung, *(client.submit(make_image(seed=10 + i), "pan left").id for i in range(4))]
    records = settle(fleet, jobs, timeout=120)

    assert all(r.status is JobState.SUCCEEDED for r in records.values()), records
    assert records[hung].attempts == 2
    assert log_events(fleet, worker, "worker.heartbeat_lost")
    report_case("batch slot hangs (no step, no return)", fleet, records, recovered_s=recovered_s)
