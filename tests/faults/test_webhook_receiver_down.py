"""The webhook receiver is down for a minute while jobs complete: every completed event is
delivered once it is back (retries on the durable schedule), and no job waits on it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from launcher.local_servers import free_port
from tests.faults.conftest import settle, standin, wait_until

pytestmark = pytest.mark.faults

OUTAGE_S = 60.0
SENDER_ENV = {
    "ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1",
    # Seconds instead of hours, and long enough to outlast the outage: 0, 1, 3, 7, 15, 30, 60,
    # 90, 120 s after the event.
    "ANIMFLEET_WEBHOOK_SCHEDULE_S": "0,1,2,4,8,15,30,30,30",
    "ANIMFLEET_WEBHOOK_POLL_S": "0.2",
    "ANIMFLEET_WEBHOOK_LEASE_S": "10",
    "ANIMFLEET_WEBHOOK_TIMEOUT_S": "2",
}


class Receiver:
    """Records the JSON bodies POSTed to it; answers 200."""

    def __init__(self, port: int) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.lock:
                    receiver.bodies.append(json.loads(body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def completed(self) -> set[str]:
        with self.lock:
            return {b["data"]["id"] for b in self.bodies if b["type"] == "job.completed"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    started: list[Receiver] = []
    yield started
    for receiver in started:
        receiver.close()


def test_receiver_down_for_a_minute_gets_every_completed_event_afterwards(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
    receivers: list[Receiver],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANIMFLEET_NETGUARD_ALLOW_LOOPBACK", "1")  # this dispatcher's URL check
    fleet = make_fleet(
        workers_per_region=2, model_dir=standin(0.5), webhooks=True, service_env=SENDER_ENV
    )
    client = make_client(fleet)
    port = free_port()  # nothing listens there yet: connection refused
    url = f"http://127.0.0.1:{port}/hook"
    down_until = time.monotonic() + OUTAGE_S
    jobs = [
        client.submit(
            make_image(seed=i), "pan left", webhook_url=url, webhook_events_filter=["completed"]
        ).id
        for i in range(6)
    ]
    records = settle(fleet, jobs, timeout=60)  # jobs do not wait on their webhooks
    assert all(r.status is JobState.SUCCEEDED for r in records.values())
    time.sleep(max(0.0, down_until - time.monotonic()))

    receivers.append(Receiver(port))
    wait_until(lambda: receivers[0].completed() == set(jobs), "every completed event", 90)
    outcomes = [
        attempt.outcome for job in jobs for attempt in settle(fleet, [job])[job].webhook_attempts
    ]
    assert "retry" in outcomes and outcomes.count("delivered") == len(jobs)
