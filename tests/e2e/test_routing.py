"""Capacity-aware routing on a real fleet: three regions, a router process, real workers.

``ra`` is 20 ms from ``rb`` and 200 ms from ``rc``; each region has one GPU worker. Long jobs
hold a region's only GPU until the test cancels them, so "full" is exact and needs no timing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from animfleet.jobs import JobState
from animfleet.region.keys import ROUTING_KEY
from animfleet.region.store_client import store_client
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.client import JobHandle
from dispatcher.routing import RoutingTable
from launcher.local_fleet import LocalFleet

pytestmark = pytest.mark.e2e

REGIONS = ("ra", "rb", "rc")
LATENCY = {"ra": {"rb": 20.0, "rc": 200.0}, "rb": {"rc": 190.0}}
HOLD = {"steps": 100, "frames": 32, "width": 128, "height": 128}  # over a minute here
QUICK = {"steps": 2}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, shipped_model: Path) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("routed"),
        regions=REGIONS,
        model_dir=shipped_model,
        latency_ms=LATENCY,
        router_period_s=0.5,
        # One GPU per region: let a neighbour take a whole GPU's worth of spilled traffic.
        service_env={"ANIMFLEET_ROUTING_SPILL_TARGET": "1.0"},
    ) as running:
        yield running


@pytest.fixture
def client(fleet: LocalFleet) -> Iterator[Client]:
    # The backoff policy (no backlog): a job waits in the dispatcher until a region has room.
    settings = AdmissionSettings(
        retry_budget_s=60.0,
        max_attempts=1000,
        backoff_initial_s=0.1,
        backoff_max_s=0.5,
        backlog=False,
    )
    client = Client(fleet.topology, admission=settings, routing_region="ra")
    yield client
    client.close()


def table(fleet: LocalFleet) -> RoutingTable:
    raw = store_client(fleet.store_url("ra")).get(ROUTING_KEY)
    assert raw is not None, "the router has not written a table"
    return RoutingTable.from_json(json.dumps(json.loads(raw)["table"]))


def cached(client: Client) -> RoutingTable:
    """The table the client places by: its background cache lags Redis by up to one refresh."""
    return client.routing.snapshot().table


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"timed out waiting until {what}"
        time.sleep(0.1)
    return time.monotonic() - started


def running(job: JobHandle) -> bool:
    record = job.get()
    assert not record.status.terminal, f"{job.id} ended early: {record.status} {record.error}"
    return record.status is JobState.RUNNING


def submit_in_background(client: Client, image: bytes) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def run() -> None:
        try:
            result.append(client.submit(image, "zoom in", home_region="ra", **HOLD))
        except Exception as error:  # reported by the test, not swallowed
            result.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_spill_near_then_far_return_home_and_survive_region_loss(
    fleet: LocalFleet, client: Client, make_image: Callable[..., bytes]
) -> None:
    image = make_image(128, 128)
    held: list[JobHandle] = []

    # 1. Home first: an idle home region takes its own job.
    held.append(client.submit(image, "pan left", home_region="ra", **HOLD))
    assert held[0].region == "ra"
    wait_until(lambda: running(held[0]), "ra runs its job")

    # 2. Home full: the next job spills to the nearest region, not the idle far one.
    held.append(client.submit(image, "pan left", home_region="ra", **HOLD))
    assert held[1].region == "rb"
    wait_until(lambda: running(held[1]), "rb runs the spilled job")

    # 3. Near full too: the job waits (backoff) until the router, seeing the overload, opens
    #    the far ring; then it runs 200 ms away rather than failing.
    thread, result = submit_in_background(client, image)
    thread.join(timeout=70)
    assert result and isinstance(result[0], JobHandle), (result, table(fleet).shares)
    held.append(result[0])
    assert held[2].region == "rc"

    # 4. Free the home region: the table returns ra's traffic home within a few periods.
    for job in held:
        client.cancel(job.id)  # each stops at its next denoising step
    wait_until(lambda: all(job.get().status.terminal for job in held), "the held jobs end")
    wait_until(lambda: fleet.heartbeats("ra")[0]["state"] == "idle", "ra's GPU is free")
    seconds = wait_until(lambda: table(fleet).share("ra", "ra") == 1.0, "ra's traffic is home")
    assert seconds < 15
    wait_until(lambda: cached(client).share("ra", "ra") == 1.0, "the client's cache catches up")
    back = client.submit(image, "pan left", home_region="ra", **QUICK)
    assert back.region == "ra" and back.wait(120).status is JobState.SUCCEEDED

    # 5. Lose every worker of ra: within a heartbeat timeout its traffic goes elsewhere.
    for name in [n for n in fleet.processes if n.startswith("worker-ra-")]:
        fleet.kill_process(name)
    seconds = wait_until(lambda: table(fleet).share("ra", "ra") == 0, "ra is routed around")
    assert seconds < 10
    wait_until(lambda: cached(client).share("ra", "ra") == 0, "the client's cache catches up")
    elsewhere = client.submit(image, "pan left", home_region="ra", **QUICK)
    assert elsewhere.region in {"rb", "rc"}
    assert elsewhere.wait(120).status is JobState.SUCCEEDED
    for job in [*held, back, elsewhere]:
        assert job.get().status.terminal, f"{job.id} was lost"
