"""Errors a caller should retry carry ``Retry-After``: here, the region's broker is down."""

from __future__ import annotations

import base64
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx

from animfleet.topology import Topology
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.gateway import GatewaySettings
from launcher.local_servers import free_port


def test_a_broker_outage_is_503_with_retry_after(
    serve: Callable[[Client, GatewaySettings], AbstractContextManager[str]],
    make_image: Callable[..., bytes],
) -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    topology = Topology.from_mapping({"regions": {"down": {"broker_url": nobody}}}, env={})
    client = Client(topology, admission=AdmissionSettings(retry_budget_s=0.0, max_attempts=1))
    image = "data:image/png;base64," + base64.b64encode(make_image()).decode()
    with serve(client, GatewaySettings(region="down", auth=False)) as url:
        responses = [
            httpx.get(f"{url}/v1/jobs/down.0123abcd", timeout=30),
            httpx.post(f"{url}/v1/jobs", json={"image": image, "prompt": "pan"}, timeout=30),
            httpx.get(f"{url}/v1/regions", timeout=30),
        ]
    for response in responses:
        assert response.status_code == 503, response.text
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["code"] in {"broker_unavailable", "enqueue_failed"}
