"""The router dies: dispatchers keep admitting with the last table, then fall back to
home-only routing once it is stale; no job is lost either way."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import settle, standin, wait_until

pytestmark = pytest.mark.faults


def test_dead_router_last_table_then_home_only(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(regions=("fa", "fb"), model_dir=standin(0.5), router_period_s=0.5)
    client = make_client(fleet)
    wait_until(lambda: client.routing.snapshot().live != {}, "a routing table from the router")
    fleet.kill_process("router")
    computed_at = client.routing.snapshot().table.computed_at

    jobs = [client.submit(make_image(seed=i), "pan left", home_region="fa").id for i in range(2)]
    # Still the router's last table while it is fresh.
    assert client.routing.snapshot().table.computed_at == computed_at

    stale_at = computed_at + client.routing.stale_after_s
    wait_until(lambda: time.time() > stale_at + 1, "the table to go stale", timeout=40)
    snapshot = client.routing.snapshot()
    assert snapshot.live == {} and snapshot.table.shares["fa"] == {"fa": 1.0}  # home-only
    late = [
        client.submit(make_image(seed=i), "pan left", home_region=h).id
        for i, h in enumerate(["fa", "fb", "fa", "fb"])
    ]

    records = settle(fleet, jobs + late, timeout=120)
    assert all(r.status is JobState.SUCCEEDED for r in records.values())
    assert [records[j].region for j in late] == ["fa", "fb", "fa", "fb"]
