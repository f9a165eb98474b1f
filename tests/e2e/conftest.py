"""A real fleet for end-to-end tests: private Redis, SeaweedFS S3, one worker process per region."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from animfleet.region.affinity import direct_queue
from animfleet.region.broker import BrokerLink
from animfleet.region.keys import DIRECT_QUEUES, JOB_KEY
from animfleet.region.store_client import store_client
from dispatcher import Client
from launcher.local_fleet import LocalFleet


@pytest.fixture(scope="package")
def fleet(tmp_path_factory: pytest.TempPathFactory, shipped_model: Path) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("fleet"),
        regions=("east", "west"),
        storage="s3",
        model_dir=shipped_model,
    ) as running:
        yield running


@pytest.fixture
def client(fleet: LocalFleet) -> Iterator[Client]:
    client = Client(fleet.topology)
    yield client
    client.close()


# -- the job API: gateway, webhook sender and two GPU workers in one region --------------------
SECRETS = [
    "whsec_" + base64.b64encode(bytes(range(32))).decode(),
    "whsec_" + base64.b64encode(bytes(range(100, 132))).decode(),  # a rotation: both sign
]
API_ENV = {
    "ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1",
    # A compressed retry schedule: seconds instead of hours.
    "ANIMFLEET_WEBHOOK_SCHEDULE_S": ",".join(["0", "0.3", "0.5"] + ["0.5"] * 27),
    "ANIMFLEET_WEBHOOK_JITTER": "0.1",
    "ANIMFLEET_WEBHOOK_POLL_S": "0.1",
    "ANIMFLEET_WEBHOOK_LEASE_S": "5",
    "ANIMFLEET_WEBHOOK_TIMEOUT_S": "2",
    # Two GPUs may hold four jobs (two running, two queued); with no room in the backlog, a full
    # region answers at once (429 backlog_full).
    "ANIMFLEET_ADMISSION_ALLOWANCE": "1",
    "ANIMFLEET_ADMISSION_RETRY_BUDGET_S": "0.5",
    "ANIMFLEET_ADMISSION_BACKLOG_REGION_CAP": "0",
}


@pytest.fixture(scope="package")
def api_fleet(
    tmp_path_factory: pytest.TempPathFactory, shipped_model: Path
) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("api-fleet"),
        regions=("api",),
        storage="s3",
        workers_per_region=2,
        model_dir=shipped_model,
        gateway=True,
        webhooks=True,
        service_env=API_ENV,
        webhook_secrets=SECRETS,
    ) as running:
        yield running


@pytest.fixture
def api(api_fleet: LocalFleet) -> Iterator[httpx.Client]:
    """An HTTP client for the gateway; the region is idle again when the test ends."""
    with httpx.Client(base_url=api_fleet.gateway_url(), timeout=90) as http:
        yield http
        _cancel_all(api_fleet, http)


def _cancel_all(fleet: LocalFleet, http: httpx.Client) -> None:
    """Cancel whatever a test left queued or running, and wait until both GPUs are idle."""
    store = store_client(fleet.store_url("api"))
    for raw in store.keys(JOB_KEY + "*"):
        job_id = raw.decode()[len(JOB_KEY) :]
        http.post(f"/v1/jobs/{job_id}/cancel")
    deadline = time.monotonic() + 60
    # Idle workers and an empty queue: canceled jobs' messages were received and skipped.
    region = fleet.topology.region("api")
    workers = [raw.decode() for raw in store.smembers(DIRECT_QUEUES + "api")]
    queues = [region.queue, *(direct_queue(region, worker) for worker in workers)]
    broker = BrokerLink(region)  # the fleet's broker: its Redis, or RabbitMQ
    while any(broker.depth(q) for q in queues) or any(b["job_id"] for b in fleet.heartbeats("api")):
        assert time.monotonic() < deadline, "workers still busy after cancel"
        time.sleep(0.05)
    broker.close()


@pytest.fixture
def png_data_uri(make_image: Callable[..., bytes]) -> str:
    return "data:image/png;base64," + base64.b64encode(make_image()).decode()


class Receiver:
    """A webhook receiver on loopback: records every request, answers from a script."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.times: list[float] = []  # monotonic arrival time of each request
        self.answers: list[tuple[int, dict[str, str]]] = []  # consumed first, then 200
        self.lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                with receiver.lock:
                    receiver.requests.append((headers, body))
                    receiver.times.append(time.monotonic())
                    status, extra = receiver.answers.pop(0) if receiver.answers else (200, {})
                    receiver.lock.notify_all()
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(body) for _, body in self.requests]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate():
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"receiver: condition not met in {timeout}s: {self.requests}"
                self.lock.wait(remaining)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


@pytest.fixture
def make_receiver() -> Iterator[Callable[[int], Receiver]]:
    """Start a receiver on a given port, later in a test."""
    started: list[Receiver] = []

    def make(port: int) -> Receiver:
        started.append(Receiver(port))
        return started[-1]

    yield make
    for running in started:
        running.close()
