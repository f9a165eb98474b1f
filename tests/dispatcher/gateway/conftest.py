"""A gateway in a uvicorn server thread on a free loopback port: real HTTP, in this process,
served as ``animfleet web`` serves it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
import redis
import uvicorn

from animfleet.topology import Topology
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.gateway import GatewaySettings, create_app
from dispatcher.gateway.server import server_config
from launcher.local_fleet import LocalFleet
from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY, free_port
from storage import ObjectStore, open_store
from storage.s3 import S3Store


@contextmanager
def _serve(client: Client, settings: GatewaySettings) -> Iterator[str]:
    port = free_port()
    app = create_app(client, settings)
    server = uvicorn.Server(server_config(app, settings, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        client.close()


@pytest.fixture(scope="session")
def serve() -> Callable[[Client, GatewaySettings], AbstractContextManager[str]]:
    """``with serve(client, settings) as url:`` runs a gateway for ``client``."""
    return _serve


def s3_region(servers: LocalFleet, region: str, bucket: str, db: int) -> Topology:
    """One region on the test SeaweedFS (``bucket``, created) and Redis database ``db``
    (emptied)."""
    storage = {
        "backend": "s3",
        "bucket": bucket,
        "endpoint_url": servers.s3_endpoint,
        "access_key_id": S3_ACCESS_KEY,
        "secret_access_key": S3_SECRET_KEY,
    }
    S3Store(
        bucket=bucket,
        endpoint_url=servers.s3_endpoint,
        access_key_id=S3_ACCESS_KEY,
        secret_access_key=S3_SECRET_KEY,
    ).ensure_bucket()
    redis.Redis(port=servers.redis_port, db=db).flushdb()
    broker = f"redis://127.0.0.1:{servers.redis_port}/{db}"
    regions = {region: {"broker_url": broker, "storage": storage}}
    return Topology.from_mapping({"regions": regions}, env={})


@pytest.fixture(scope="module")
def s3_topology(servers: LocalFleet, request: pytest.FixtureRequest) -> Topology:
    """The test module's region (its REGION, BUCKET and DB) on the test SeaweedFS."""
    module = request.module
    return s3_region(servers, module.REGION, module.BUCKET, module.DB)


@pytest.fixture(scope="module")
def s3_store(s3_topology: Topology, request: pytest.FixtureRequest) -> ObjectStore:
    return open_store(s3_topology.region(request.module.REGION).storage)


@pytest.fixture(scope="module")
def s3_gateway(s3_topology: Topology, request: pytest.FixtureRequest) -> Iterator[str]:
    """A gateway (keys on) for the module's S3 region."""
    admission = AdmissionSettings(retry_budget_s=0.0, max_attempts=1)
    settings = GatewaySettings(
        region=request.module.REGION, events_poll_s=0.05, events_heartbeat_s=0.5
    )
    with _serve(Client(s3_topology, admission=admission), settings) as url:
        yield url
