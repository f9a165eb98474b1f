"""Partial failures of the store: the server did the work and only the reply was lost.

A TCP proxy between the dispatcher or the worker and the region's store drops the reply to one
chosen write after Redis ran it (the admission script, a run's start, its finish), and closes the
connection: the store client's retry must be answered with the outcome that happened. A proxy
in front of the region's S3 server throttles (503) reads of archived records while the sweeper
reconciles outputs: a read that failed must never delete a video.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from animfleet.jobs import JobRecord, JobState
from animfleet.region.admission import _ADMIT
from animfleet.region.keys import JOB_KEY
from animfleet.region.store_client import store_client
from animfleet.topology import Topology
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from storage import open_store
from tests.faults.conftest import (
    ADMIT_MANY,
    FAULT_WORKER_ENV,
    report_case,
    settle,
    standin,
    wait_until,
)
from tests.fixtures.reply_drop import ReplyDropProxy
from tests.fixtures.standin import ANIMATOR as STANDIN
from tests.fixtures.throttle_s3 import ThrottlingS3Proxy

pytestmark = pytest.mark.faults

ADMISSION_SHA = hashlib.sha1(_ADMIT.encode()).hexdigest().encode()
FAST_SWEEPS = {"ANIMFLEET_SWEEPER_POLL_S": "0.2", "ANIMFLEET_SWEEPER_LEASE_S": "1"}


@dataclass
class Proxied:
    """A fleet whose worker (and :attr:`client`) reach the region's Redis through the proxy."""

    fleet: LocalFleet
    proxy: ReplyDropProxy
    client: Client


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """One fleet for the lost-reply cases (each settles its jobs before the next arms)."""
    fleet = LocalFleet(
        tmp_path_factory.mktemp("lost-replies") / "fleet",
        regions=("fa",),
        workers_per_region=0,
        model_dir=standin(2.0, 0.05),  # the first jobs hold the GPU while the rest submit
        animator=STANDIN,
        worker_env=dict(FAULT_WORKER_ENV),
        sweeper=True,
        scheduler=True,
        service_env=FAST_SWEEPS,
    )
    if fleet.store == "cluster":
        # A cluster client reaches the nodes the cluster names, not the proxy; the replay on
        # a cluster store: tests/animfleet/region/test_admission_replay.py.
        pytest.skip("the proxy stands in front of one Redis")
    with fleet:
        proxy = ReplyDropProxy(fleet.redis_port).start()
        text = fleet.fleet_file.read_text()
        text = text.replace(f"127.0.0.1:{fleet.redis_port}/", f"127.0.0.1:{proxy.port}/")
        proxied_file = fleet.root / "fleet-proxied.toml"
        proxied_file.write_text(text)
        fleet.worker_env["ANIMFLEET_FLEET_FILE"] = str(proxied_file)
        fleet.start_worker("fa")
        fleet.wait_for_workers({"fa": 1})
        client = Client(Topology.load(proxied_file), admission=ADMIT_MANY)
        yield Proxied(fleet, proxy, client)
        client.close()
        proxy.stop()


def job_count(fleet: LocalFleet) -> int:
    client = store_client(fleet.store_url("fa"))
    try:
        return sum(1 for _ in client.scan_iter(f"{JOB_KEY}*"))
    finally:
        client.close()


def log_events(fleet: LocalFleet, process: str, job_id: str) -> list[dict[str, object]]:
    """The JSON lines of ``process``'s log about ``job_id``."""
    found = []
    for line in (fleet.root / "logs" / f"{process}.log").read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("job_id") == job_id:
            found.append(entry)
    return found


def test_a_lost_admission_reply_makes_exactly_one_job(
    proxied: Proxied, make_image: Callable[..., bytes]
) -> None:
    fleet, proxy, client = proxied.fleet, proxied.proxy, proxied.client
    first = client.submit(make_image(seed=0), "warm the script").id  # loaded: EVALSHA runs
    # One GPU, room for two: the unkeyed job goes onto the GPU queue (a blind re-run would find
    # its slot taken and backlog a second job), the keyed one into the backlog.
    cases = [({}, b"\r\ndirect\r\n"), ({"idempotency_key": "lost-reply"}, b"\r\nbacklog\r\n")]
    jobs = [first]
    started = time.monotonic()
    for index, (fields, mode) in enumerate(cases, start=1):
        trigger = proxy.drop_reply(ADMISSION_SHA, mode)
        handle = client.submit(make_image(seed=index), "pan left", **fields)
        assert trigger.fired == 1, "the proxy never dropped the admission's reply"
        assert handle.created
        jobs.append(handle.id)
        assert job_count(fleet) == len(jobs), "a lost reply made a second job"
    recovered_s = time.monotonic() - started
    again = client.submit(make_image(seed=2), "pan left", idempotency_key="lost-reply")
    assert (again.id, again.created) == (jobs[2], False)

    records = settle(fleet, jobs, timeout=90)
    assert all(r.status is JobState.SUCCEEDED and r.attempts == 1 for r in records.values())
    assert job_count(fleet) == len(jobs)
    report_case("admission reply lost (GPU queue, backlog)", fleet, records, recovered_s)


def dropped_reply_run(
    proxied: Proxied, make_image: Callable[..., bytes], jobs: int, *markers: bytes
) -> tuple[dict[str, JobRecord], float]:
    """Submit ``jobs`` jobs with the reply of the first worker write carrying ``markers``
    dropped; their settled records and the seconds from the first submit."""
    trigger = proxied.proxy.drop_reply(*markers)
    started = time.monotonic()
    ids = [proxied.client.submit(make_image(seed=i), "sway").id for i in range(jobs)]
    wait_until(lambda: trigger.fired == 1, "the worker's reply dropped", 60)
    records = settle(proxied.fleet, ids, timeout=90)
    for record in records.values():
        assert record.status is JobState.SUCCEEDED, record
        assert record.attempts == 1, f"{record.id} started {record.attempts} times"
    return records, time.monotonic() - started


def test_a_lost_run_start_reply_burns_no_attempt(
    proxied: Proxied, make_image: Callable[..., bytes]
) -> None:
    # The first transaction that takes a run lease is the first job's start.
    records, recovered_s = dropped_reply_run(
        proxied, make_image, 2, b"MULTI", b"run-lease:", b"EXEC"
    )
    report_case("run start reply lost", proxied.fleet, records, recovered_s)


def test_a_lost_finish_reply_counts_the_outcome_once(
    proxied: Proxied, make_image: Callable[..., bytes]
) -> None:
    # The first transaction that drops a job's input is its finish.
    records, recovered_s = dropped_reply_run(proxied, make_image, 1, b"MULTI", b"input:", b"EXEC")
    (job,) = records
    events = log_events(proxied.fleet, "worker-fa-0", job)
    # The worker counts a finished job's outcome (its version's canary judgement) where it
    # logs the transition: once, and never a refused finish of its own committed one.
    finished = [e for e in events if e.get("event") == "job.transition" and e.get("status")]
    assert [e["status"] for e in finished] == ["running", "succeeded"], finished
    assert not [e for e in events if e.get("event") == "job.finish_refused"]
    report_case("run finish reply lost", proxied.fleet, records, recovered_s)


def test_throttled_archive_reads_delete_no_output(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        storage="s3", workers_per_region=1, model_dir=standin(0.2, 0.05), sweeper=False
    )
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(3)]
    records = settle(fleet, jobs, timeout=90)
    proxy = ThrottlingS3Proxy(fleet.s3_port, "/records/").start()
    proxy.throttling.set()
    proxied_file = fleet.root / "fleet-throttled.toml"
    proxied_file.write_text(fleet.fleet_file.read_text().replace(fleet.s3_endpoint, proxy.endpoint))
    fleet.service_env.update(
        {
            **FAST_SWEEPS,
            "ANIMFLEET_FLEET_FILE": str(proxied_file),
            "ANIMFLEET_SWEEPER_ARCHIVE_AFTER_S": "0",  # every finished record moves at once
            "ANIMFLEET_SWEEPER_RECONCILE_EVERY_S": "0.2",
            "ANIMFLEET_SWEEPER_ORPHAN_OUTPUT_AGE_S": "0",  # an orphan would go on first sight
        }
    )
    started = time.monotonic()
    fleet.start_sweeper()
    store = store_client(fleet.store_url("fa"))
    wait_until(lambda: not any(store.exists(JOB_KEY + j) for j in jobs), "records archived", 60)
    store.close()
    wait_until(lambda: proxy.throttled >= 3 * len(jobs), "reconcile passes throttled", 60)
    proxy.throttling.clear()
    unreadable = [
        e for e in _sweeper_lines(fleet) if e.get("event") == "output.reconcile_unreadable"
    ]
    assert unreadable, "the sweeper never met a throttled read"
    wait_until(lambda: proxy.passed >= 2 * len(jobs), "passes that read every record", 30)

    region = fleet.topology.region("fa").storage
    outputs = open_store(region).list_keys(region.prefix + "outputs/")
    for job_id in jobs:
        archived = client.get(job_id)  # through the archive: the record Redis no longer has
        assert archived.status is JobState.SUCCEEDED and archived.output is not None
        assert archived.output.key in outputs, f"{job_id}'s video was deleted"
    assert not [e for e in _sweeper_lines(fleet) if e.get("event") == "output.orphan_deleted"]
    recovered_s = time.monotonic() - started
    proxy.stop()
    report_case("archive reads throttled (503) during reconcile", fleet, records, recovered_s)


def _sweeper_lines(fleet: LocalFleet) -> list[dict[str, object]]:
    lines = []
    for line in (fleet.root / "logs" / "sweeper.log").read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines
