"""Fault tests: a real fleet (Redis, storage, worker processes) per test, a fault injected, and
the same accounting afterwards: no job lost, none stuck, outputs exactly for succeeded jobs.

Workers run the model stand-in (``tests/fixtures/standin.py``), so a job holds its worker for
a known time without a model's CPU cost, and time limits are short so redeliveries after a dead
worker host come within seconds rather than the production 15 minutes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from animfleet.jobs import JobRecord, JobState, region_of
from animfleet.region.jobstore import JobNotFound, JobStore
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from launcher.local_fleet import LocalFleet
from storage import open_store
from tests.fixtures.standin import ANIMATOR as STANDIN

pytestmark = pytest.mark.faults

# Soft < hard < visibility: a message held by a worker host that died is restored after 30 s.
FAULT_WORKER_ENV = {
    "ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S": "20",
    "ANIMFLEET_WORKER_HARD_TIME_LIMIT_S": "25",
    "ANIMFLEET_WORKER_VISIBILITY_TIMEOUT_S": "30",
    "ANIMFLEET_WORKER_UPLOAD_RETRY_S": "15",  # must fit inside the soft limit
}
# A queued job per GPU besides the running one: a fault test wants jobs waiting during the fault;
# a submit beyond that waits for room.
ADMIT_MANY = AdmissionSettings(allowance=1.0, retry_budget_s=60.0)


def standin(seconds: float, jitter: float = 0.1) -> Path:
    return Path(f"standin:{seconds}:{jitter}")


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[Callable[..., LocalFleet]]:
    """``make_fleet(regions=..., workers_per_region=..., **LocalFleet fields)``, started;
    stopped when the test ends."""
    started: list[LocalFleet] = []

    def make(**options: Any) -> LocalFleet:
        options.setdefault("regions", ("fa",))
        options.setdefault("storage", "local")
        options.setdefault("model_dir", standin(1.0))
        options.setdefault("animator", STANDIN)
        options["worker_env"] = {**FAULT_WORKER_ENV, **options.get("worker_env", {})}
        fleet = LocalFleet(tmp_path / f"fleet{len(started)}", **options)
        started.append(fleet)
        fleet.start()
        return fleet

    yield make
    for fleet in started:
        fleet.stop()


@pytest.fixture
def make_client() -> Iterator[Callable[[LocalFleet], Client]]:
    clients: list[Client] = []

    def make(fleet: LocalFleet) -> Client:
        clients.append(Client(fleet.topology, admission=ADMIT_MANY))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def record_of(fleet: LocalFleet, job_id: str) -> JobRecord:
    """The job's record where it lives: a spilled job's home record points to its region; a
    client-chosen id's entry in a unit's store names the region that admitted it."""
    region = region_of(job_id) if "." in job_id else _chosen_id_region(fleet, job_id)
    for _ in fleet.units:
        record = JobStore.from_url(fleet.store_url(region), retry_s=5).get(job_id)
        if record.region == region:
            return record
        region = record.region
    raise AssertionError(f"job {job_id}: its records point in a circle")


def _chosen_id_region(fleet: LocalFleet, job_id: str) -> str:
    for unit in fleet.units:
        found = JobStore.from_url(fleet.store_url(unit), retry_s=5).idempotent_job(f"id:{job_id}")
        if found is not None:
            return found[1]
    raise JobNotFound(job_id)


def running_on(fleet: LocalFleet, job_id: str) -> str:
    """The worker name running ``job_id`` once it is past its first step."""
    wait_until(lambda: record_of(fleet, job_id).progress.step >= 1, f"{job_id} running", timeout=90)
    worker = record_of(fleet, job_id).worker
    assert worker is not None
    return worker.partition("@")[0]


def settle(fleet: LocalFleet, job_ids: list[str], timeout: float = 180.0) -> dict[str, JobRecord]:
    """Wait for every job to be terminal, then check the accounting and the outputs.

    - no job lost: every submitted id has a record;
    - none stuck: each reaches a terminal state within ``timeout``;
    - submitted = succeeded + failed + canceled + expired;
    - an output object exists exactly for the succeeded jobs, and at most one per job.
    """
    assert len(set(job_ids)) == len(job_ids)
    deadline = time.monotonic() + timeout
    records: dict[str, JobRecord] = {}
    while True:
        for job_id in job_ids:
            if job_id not in records or not records[job_id].status.terminal:
                try:
                    records[job_id] = record_of(fleet, job_id)
                except JobNotFound:
                    raise AssertionError(f"job {job_id} was lost: no record") from None
        stuck = [j for j, r in records.items() if not r.status.terminal]
        if not stuck:
            break
        assert time.monotonic() < deadline, f"stuck non-terminal after {timeout}s: " + ", ".join(
            f"{j}={records[j].status.value}" for j in stuck
        )
        time.sleep(0.2)
    counts = Counter(record.status for record in records.values())
    assert len(job_ids) == sum(counts[state] for state in JobState if state.terminal)
    outputs: Counter[str] = Counter()
    # Once per storage: a region's cells share theirs.
    storages = {fleet.topology.region(unit).storage.model_dump_json(): unit for unit in fleet.units}
    for unit in storages.values():
        storage = fleet.topology.region(unit).storage
        for key in open_store(storage).list_keys(storage.prefix + "outputs/"):
            outputs.update(job_id for job_id in job_ids if job_id in key)
    for job_id, record in records.items():
        expected = 1 if record.status is JobState.SUCCEEDED else 0
        DUPLICATES[job_id] = max(0, outputs[job_id] - expected)
        assert outputs[job_id] == expected, (
            f"{job_id} is {record.status.value} with {outputs[job_id]} output objects"
        )
        if record.status is JobState.SUCCEEDED:
            assert record.output is not None and job_id in record.output.key
    return records


# The fault run's table: one row per case, printed at the end of the session and written to
# out/faults/report.md. Lost, stuck and duplicated come from settle()'s checks.
DUPLICATES: dict[str, int] = {}
REPORT: list[dict[str, Any]] = []
REPORT_FILE = Path(__file__).resolve().parents[2] / "out" / "faults" / "report.md"


def report_case(
    case: str, fleet: LocalFleet, records: dict[str, JobRecord], recovered_s: float | None
) -> None:
    """Add ``case`` to the fault run's table (call it with the records settle() returned)."""
    del fleet
    failed = Counter(
        record.error.code if record.error else "?"
        for record in records.values()
        if record.status is not JobState.SUCCEEDED
    )
    REPORT.append(
        {
            "case": case,
            "submitted": len(records),
            "succeeded": sum(r.status is JobState.SUCCEEDED for r in records.values()),
            "failed": ", ".join(f"{code} {n}" for code, n in sorted(failed.items())) or "-",
            "lost": 0,  # settle() raises on a job without a record
            "stuck": sum(not r.status.terminal for r in records.values()),
            "duplicated": sum(DUPLICATES.get(job_id, 0) for job_id in records),
            "recover_s": "-" if recovered_s is None else f"{recovered_s:.1f}",
        }
    )


def report_table() -> str:
    header = ["case", "submitted", "succeeded", "failed", "lost", "stuck", "duplicated"]
    header.append("recover_s")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in REPORT:
        lines.append("| " + " | ".join(str(row[name]) for name in header) + " |")
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT:
        return
    table = report_table()
    REPORT_FILE.parent.mkdir(parents=True, exist_ok=True)
    REPORT_FILE.write_text(table + "\n")
    terminalreporter.write_sep("-", "fault run")
    terminalreporter.write_line(table)
