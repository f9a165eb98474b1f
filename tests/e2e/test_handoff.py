"""The hand-off when saturated, on real workers: with both workers busy, backlog jobs go to the
worker that holds their image warm, not to whichever frees first."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from animfleet.jobs import JobRecord, JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet, default_broker
from tests.fixtures.standin import ANIMATOR as STANDIN

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        default_broker() == "rabbitmq",
        reason="no direct queues on RabbitMQ: per-consumer prefetch (docs/brokers.md)",
    ),
]
REGION = "ho"
JOB: dict[str, Any] = {"frames": 4, "width": 32, "height": 32}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("handoff-fleet"),
        regions=(REGION,),
        storage="local",
        workers_per_region=2,
        # 0.3 s a job, 0.3 s more for an image the worker does not hold (it holds 4).
        model_dir=Path("standin:0.3:0:48:0.3:4"),
        animator=STANDIN,
        scheduler=True,
    ) as running:
        yield running


def picture(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def run_all(client: Client, images: list[bytes]) -> list[JobRecord]:
    handles = [client.submit(image, "sway", **JOB) for image in images]
    records = [handle.wait(timeout=120) for handle in handles]
    assert [r.status for r in records] == [JobState.SUCCEEDED] * len(records)
    return records


def test_a_freed_worker_takes_the_backlog_job_whose_image_it_holds(fleet: LocalFleet) -> None:
    client = Client(fleet.topology)
    try:
        a, b = picture(1), picture(2)
        # Two idle workers, two images at once: one worker prepares each.
        first = run_all(client, [a, b])
        x, y = first[0].worker, first[1].worker
        assert x and y and x != y, f"both images went to {x}"
        # Both workers busy with cold blockers; the rest waits in the backlog, b's jobs first.
        handles = [client.submit(picture(seed), "sway", **JOB) for seed in (3, 4)]
        handles += [client.submit(image, "sway", **JOB) for image in (b, b, b, a, a, a)]
        records = [handle.wait(timeout=120) for handle in handles]
        assert all(r.status is JobState.SUCCEEDED for r in records)
        ran = [r.worker for r in records[2:]]
        # In backlog order, whichever worker frees first would take the first b job; the
        # hand-off gives each worker the jobs of the image it holds.
        assert ran == [y, y, y, x, x, x], (x, y, ran)
    finally:
        client.close()
