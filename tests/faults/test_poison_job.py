"""A job that kills its worker process every time (asks for more memory than the host may
give): dead-lettered after ``max_deliveries``, failed ``worker_lost``, the worker serves on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import settle, standin

pytestmark = pytest.mark.faults

# A worker process with the model stand-in loaded holds ~400 MB; the stand-in's working memory
# is 48 bytes per frame-pixel: 1.5 MB for 8x64x64, 400 MB for 32x512x512.
MAX_RSS_MB = 700


def test_poison_job_is_failed_after_max_deliveries_and_the_worker_serves_others(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        workers_per_region=1,
        model_dir=standin(1.0),
        worker_env={"ANIMFLEET_WORKER_MAX_RSS_MB": str(MAX_RSS_MB)},
    )
    client = make_client(fleet)
    worker = fleet.processes["worker-fa-0"]
    poison = client.submit(make_image(), "zoom in", frames=32, width=512, height=512).id
    normal = [client.submit(make_image(seed=i), "pan left").id for i in range(1, 3)]

    records = settle(fleet, [poison, *normal], timeout=240)
    assert records[poison].status is JobState.FAILED
    assert records[poison].error is not None and records[poison].error.code == "worker_lost"
    assert records[poison].attempts == 3  # default ANIMFLEET_WORKER_MAX_DELIVERIES
    assert all(records[job].status is JobState.SUCCEEDED for job in normal)
    assert worker.poll() is None, "the worker itself must survive its children's deaths"
    log = (fleet.root / "logs" / "worker-fa-0.log").read_text()
    assert log.count('"worker.memory_guard_kill"') == 3
