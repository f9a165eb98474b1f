"""A region whose only worker is lost for good, and an input that cannot be decoded: every job
still ends in a state its user can see, by the region's sweeper process."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from animfleet.region.keys import INPUT_KEY
from animfleet.region.store_client import store_client
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import record_of, report_case, running_on, settle, standin

pytestmark = pytest.mark.faults

# The running job's deadline (8 s) passes before the orphan limit (6 s after the last worker
# lapsed, which is at least 5 s after the kill) can end it.
SWEEPER_ENV = {"ANIMFLEET_SWEEPER_ORPHAN_AFTER_S": "6"}


def test_the_regions_only_worker_lost_for_good_strands_nothing(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(
        workers_per_region=1, model_dir=standin(4.0), webhooks=True, service_env=SWEEPER_ENV
    )
    client = make_client(fleet)
    # One running with a deadline, one queued behind it with none: the case that waited forever.
    running = client.submit(make_image(seed=1), "pan left", deadline=8).id
    waiting = client.submit(make_image(seed=2), "pan left").id
    worker = running_on(fleet, running)
    fleet.kill_process(worker)
    killed = time.monotonic()

    records = settle(fleet, [running, waiting], timeout=90)
    recovered_s = time.monotonic() - killed
    # The running job went back to the queue, then ended at its deadline with no GPU to run it.
    assert records[running].status is JobState.CANCELED, records[running]
    assert records[running].error is not None
    assert records[running].error.code == "deadline_exceeded"
    # The queued one waited no longer than the region's orphan limit.
    assert records[waiting].status is JobState.EXPIRED, records[waiting]
    assert records[waiting].error is not None and records[waiting].error.code == "no_capacity"
    report_case("region's only worker lost", fleet, records, recovered_s=recovered_s)


def test_an_undecodable_stored_input_fails_as_input_invalid(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(workers_per_region=1, model_dir=standin(1.5))
    client = make_client(fleet)
    first = client.submit(make_image(seed=1), "pan left").id
    running_on(fleet, first)  # the worker is busy: the next job waits in the queue
    broken = client.submit(make_image(seed=2), "pan left").id
    # Its stored bytes are damaged after the dispatcher checked them: a valid header, no data.
    stored = store_client(fleet.store_url("fa"))
    image = stored.get(INPUT_KEY + broken)
    assert isinstance(image, bytes)
    stored.set(INPUT_KEY + broken, image[: len(image) // 3], keepttl=True)

    records = settle(fleet, [first, broken], timeout=60)
    assert records[first].status is JobState.SUCCEEDED
    assert records[broken].status is JobState.FAILED
    assert records[broken].error is not None and records[broken].error.code == "input_invalid"
    assert record_of(fleet, broken).attempts == 1
    report_case("undecodable stored input", fleet, records, recovered_s=None)
