"""A cell added to a running region between a submit and its retry.

The fleet runs three cells; the dispatchers before the change know two of them (the third's
Redis is up but unknown to them), those after know all three, the third marked as added just
now. The tenant is one the new cell wins: today's rendezvous hash moves it there at once, while
its idempotency and client-chosen-id entries stay in its old cell. A keyed retry, and a
``PUT`` of the same client-chosen id, must answer the job made before the change: one job,
found by its id, erased by ``DELETE``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from animfleet.jobs import JobState
from animfleet.region.jobstore import IdempotencyConflict, JobNotFound
from animfleet.topology import Topology
from dispatcher import Client
from dispatcher.client import JobHandle
from dispatcher.gateway.deletion import erase
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.settings import GatewaySettings
from dispatcher.tenancy import Tenancy
from launcher.local_fleet import LocalFleet
from tests.faults.conftest import (
    ADMIT_MANY,
    FAULT_WORKER_ENV,
    report_case,
    settle,
    standin,
)
from tests.fixtures.standin import ANIMATOR as STANDIN

REGION, OLD, NEW = "fc", ("fc-c1", "fc-c2"), "fc-c3"


def before_and_after(topology: Topology) -> tuple[Topology, Topology]:
    """The region as it was (two cells) and as it is (the third added a second ago)."""
    added = datetime.fromtimestamp(time.time() - 1, UTC)
    before = {name: unit for name, unit in topology.regions.items() if name != NEW}
    after = {**topology.regions, NEW: topology.regions[NEW].model_copy(update={"added_at": added})}
    return Topology(regions=before), Topology(regions=after)


def moved_tenant(before: Topology, after: Topology, name: str) -> str:
    """A tenant the new cell takes from one of the old ones."""
    return next(
        tenant
        for tenant in (f"{name}-{index}" for index in range(200))
        if after.cell_for(REGION, tenant) == NEW and before.cell_for(REGION, tenant) in OLD
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("cell-added"),
        regions=(REGION,),
        cells={REGION: 3},
        workers_per_region=1,
        storage="local",
        model_dir=standin(1.0),
        animator=STANDIN,
        worker_env=FAULT_WORKER_ENV,
    ) as running:
        yield running


@pytest.fixture
def clients(fleet: LocalFleet) -> Iterator[tuple[Client, Client]]:
    """A dispatcher from before the cell was added, and one from after."""
    before, after = before_and_after(fleet.topology)
    old, new = Client(before, admission=ADMIT_MANY), Client(after, admission=ADMIT_MANY)
    yield old, new
    old.close()
    new.close()


def listed(client: Client, tenant: str) -> list[str]:
    """The tenant's job ids as its listing shows them, across every cell."""
    return [record.id for record in Tenancy(client, NEW).list_jobs(tenant, limit=100).jobs]


def across_the_change(
    clients: tuple[Client, Client],
    image: bytes,
    name: str,
    idempotency_key: str | None = None,
    job_id: str | None = None,
) -> tuple[dict[str, Any], JobHandle]:
    """Submit as a moved tenant before the cell is added, then again with the same key or id
    after: the retry answers the first job. The submit's fields, and that job."""
    old, new = clients
    tenant = moved_tenant(old.topology, new.topology, name)
    fields: dict[str, Any] = {"home_region": REGION, "tenant": tenant, "frames": 2}
    fields |= {"width": 32, "height": 32}
    key: dict[str, Any] = {"idempotency_key": idempotency_key, "job_id": job_id}
    first = old.submit(image, "sway", **key, **fields)
    retried = new.submit(image, "sway", **key, **fields)
    assert (retried.id, retried.region, retried.created) == (first.id, first.region, False)
    assert listed(new, tenant) == [first.id]  # one job: none made in the tenant's new cell
    return fields, first


def test_a_keyed_retry_after_a_cell_is_added_answers_the_first_job(
    fleet: LocalFleet, clients: tuple[Client, Client], make_image: Callable[..., bytes]
) -> None:
    new, image = clients[1], make_image(32, 32)
    fields, first = across_the_change(clients, image, "keyed", idempotency_key="reshard-1")
    with pytest.raises(IdempotencyConflict):  # the key still names that job alone
        new.submit(image, "drift", idempotency_key="reshard-1", **fields)
    later = new.submit(image, "sway", idempotency_key="reshard-2", **fields)
    assert later.record is not None and later.record.home_region == NEW  # new jobs move
    records = settle(fleet, [first.id, later.id])
    assert {record.status for record in records.values()} == {JobState.SUCCEEDED}
    report_case("cell added between a submit and its keyed retry", fleet, records, None)


def test_a_client_chosen_id_across_a_cell_added_names_one_job_that_delete_erases(
    fleet: LocalFleet, clients: tuple[Client, Client], make_image: Callable[..., bytes]
) -> None:
    new, image = clients[1], make_image(32, 32)
    fields, first = across_the_change(clients, image, "chosen", job_id="reshard-put")
    assert first.id == "reshard-put"
    records = settle(fleet, ["reshard-put"])
    assert records["reshard-put"].status is JobState.SUCCEEDED
    assert new.get("reshard-put").region == first.region
    report_case("client-chosen id across a cell added", fleet, records, None)

    runtime = Runtime(client=new, settings=GatewaySettings(region=NEW, auth=False))
    erase(runtime, Tenancy(new, NEW), new.get("reshard-put"))
    with pytest.raises(JobNotFound):
        new.get("reshard-put")
    assert listed(new, fields["tenant"]) == []
    # The id stays bound to the erased job: a retried PUT does not make it again.
    assert not new.submit(image, "sway", job_id="reshard-put", **fields).created
    assert listed(new, fields["tenant"]) == []
