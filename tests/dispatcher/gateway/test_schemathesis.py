"""Property-based API testing: schemathesis drives the gateway over real HTTP; no answer is 5xx.

The gateway runs in a uvicorn server thread on a free loopback port, against a real Redis and a
region without GPUs (valid jobs are refused as "at capacity", quickly). Bounded in examples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from animfleet.netguard import NetGuard
from animfleet.topology import Topology
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.gateway import GatewaySettings
from launcher.local_fleet import LocalFleet


@pytest.fixture(scope="module")
def gateway_url(
    servers: LocalFleet,
    tmp_path_factory: pytest.TempPathFactory,
    serve: Callable[[Client, GatewaySettings], AbstractContextManager[str]],
) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz-storage")
    topology = Topology.from_mapping(
        {
            "regions": {
                "fuzz": {
                    "broker_url": f"redis://127.0.0.1:{servers.redis_port}/14",
                    "storage": {"backend": "local", "root": str(root)},
                }
            }
        },
        env={},
    )
    client = Client(
        topology,
        netguard=NetGuard(),
        admission=AdmissionSettings(retry_budget_s=0.0, max_attempts=1),
    )
    # Keys off: fuzzing the job routes, not the 401 every request without a key would get.
    with serve(client, GatewaySettings(region="fuzz", max_wait_s=1, auth=False)) as url:
        yield url


def test_no_request_gets_a_server_error(gateway_url: str) -> None:
    """Each operation of the published schema, with generated valid and invalid requests."""
    api = schemathesis.openapi.from_url(gateway_url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 6
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=30,
            derandomize=True,  # the same examples on every CI run
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            case.call_and_validate(checks=[not_a_server_error])

        check()


def test_openapi_lists_the_job_api(gateway_url: str) -> None:
    paths = httpx.get(gateway_url + "/openapi.json").json()["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/regions"} <= set(
        paths
    )
    assert "/v1/jobs/{job_id}/webhook/replay" in paths
