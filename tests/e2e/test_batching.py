"""A real batch worker process (``ANIMFLEET_WORKER_BATCH=4``): Celery's thread pool, one shared
denoising loop, four slots in the region's capacity; every job ends exactly once."""

from __future__ import annotations

import io
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import av
import pytest

from animfleet.jobs import JobState
from animfleet.region.broker import BrokerLink
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from storage import open_store

pytestmark = pytest.mark.e2e

REGION = "batch"
SLOTS = 4


@pytest.fixture(scope="module")
def batch_fleet(
    tmp_path_factory: pytest.TempPathFactory, shipped_model: Path
) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("batch-fleet"),
        regions=(REGION,),
        storage="s3",
        model_dir=shipped_model,
        # fp32 whatever the profile: a batch worker runs eagerly, and bf16 eager is ~40x slower
        # than fp32 on a CPU without bf16 instructions.
        worker_env={"ANIMFLEET_WORKER_BATCH": str(SLOTS), "ANIMFLEET_WORKER_PRECISION": "fp32"},
    ) as running:
        yield running


@pytest.fixture
def batch_client(batch_fleet: LocalFleet) -> Iterator[Client]:
    client = Client(batch_fleet.topology)
    yield client
    client.close()


def _running_log_lines(fleet: LocalFleet, job_id: str) -> int:
    log = (fleet.root / "logs" / f"worker-{REGION}-0.log").read_text()
    return sum(1 for line in log.splitlines() if job_id in line and '"status": "running"' in line)


def test_a_batch_worker_counts_as_its_slots_and_runs_every_job_exactly_once(
    batch_fleet: LocalFleet, batch_client: Client, make_image: Callable[..., bytes]
) -> None:
    beats = batch_fleet.heartbeats(REGION)
    assert sorted(str(b["worker"]) for b in beats) == [f"worker-{REGION}-0/{n}" for n in range(4)]
    assert batch_client.region_status(REGION).load.live_workers == SLOTS

    jobs = [
        batch_client.submit(
            make_image(32, 32, seed=n),
            ("pan left", "zoom in", "rotate clockwise")[n % 3],
            home_region=REGION,
            frames=4,
            width=32,
            height=32,
            seed=n,
            steps=(4, 8, 6)[n % 3],
        )
        for n in range(8)
    ]
    records = [job.wait(timeout=180) for job in jobs]

    store = open_store(batch_fleet.topology.region(REGION).storage)
    for record in records:
        assert record.status is JobState.SUCCEEDED, record.error
        assert record.attempts == 1 and _running_log_lines(batch_fleet, record.id) == 1
        assert record.worker is not None and record.worker.startswith(f"worker-{REGION}-0/")
        assert record.output is not None
        with av.open(io.BytesIO(store.get(record.output.key)), mode="r") as container:
            assert len(list(container.decode(video=0))) == 4
    assert len({record.worker for record in records}) > 1  # jobs shared the loop
    broker = BrokerLink(batch_fleet.topology.region(REGION))  # its Redis, or RabbitMQ
    assert broker.depth(f"animate.{REGION}") == 0
    broker.close()


def test_sigterm_drains_every_slot_at_once_and_finishes_the_jobs_it_holds(
    batch_fleet: LocalFleet, batch_client: Client, make_image: Callable[..., bytes]
) -> None:
    jobs = [
        batch_client.submit(
            make_image(32, 32, seed=n),
            "zoom in",
            home_region=REGION,
            frames=4,
            width=32,
            height=32,
            seed=n,
            steps=60,
        )
        for n in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all(job.get().progress.step >= 1 for job in jobs):
        assert time.monotonic() < deadline, "jobs never started"
        time.sleep(0.05)

    batch_fleet.signal_worker(f"worker-{REGION}-0", signal.SIGTERM)
    deadline = time.monotonic() + 10
    while batch_client.region_status(REGION).load.live_workers:
        assert time.monotonic() < deadline, "the worker's slots still count as capacity"
        time.sleep(0.05)
    assert all(job.get().status is JobState.RUNNING for job in jobs)  # drained, not dropped

    for job in jobs:
        record = job.wait(timeout=120)
        assert record.status is JobState.SUCCEEDED and record.attempts == 1
