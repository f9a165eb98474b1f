"""Webhooks end to end: real gateway, GPU workers and webhook sender; a real receiver on loopback.

Signatures are checked with the ``standardwebhooks`` package, not with the project's own code.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from animfleet.region.keys import WEBHOOK_DUE_SET, WEBHOOK_JOB_KEY
from animfleet.region.store_client import store_client
from launcher.local_fleet import LocalFleet

pytestmark = pytest.mark.e2e

SHORT = {"frames": 4, "steps": 4}


def submit(api: httpx.Client, image: str, webhook: str, **fields: Any) -> str:
    body = {"image": image, "prompt": "pan", "webhook": webhook, **SHORT, **fields}
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def attempts(api: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get(f"/v1/jobs/{job_id}").json()["webhook_attempts"]
    return found


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def verified(secret: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    payload: dict[str, Any] = Webhook(secret).verify(body, headers)
    return payload


def test_events_are_signed_with_every_active_secret(
    api: httpx.Client, api_fleet: LocalFleet, receiver: Any, png_data_uri: str
) -> None:
    job_id = submit(api, png_data_uri, receiver.url)
    # Events are delivered concurrently and at least once, so in no guaranteed order (as in
    # Standard Webhooks): wait for all three, not for the last one to be made.
    wanted = {"job.started", "job.progress", "job.completed"}
    receiver.wait_for(lambda: wanted <= {e["type"] for e in receiver.events()})
    assert len(api_fleet.webhook_secrets) == 2
    for headers, body in receiver.requests:
        assert headers["webhook-signature"].count("v1,") == 2
        for secret in api_fleet.webhook_secrets:  # either secret alone verifies: rotation works
            assert verified(secret, headers, body)["data"]["id"] == job_id
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "A" * 43 + "=").verify(body, headers)
        with pytest.raises(WebhookVerificationError):  # tampered body
            Webhook(api_fleet.webhook_secrets[0]).verify(body.replace(b"pan", b"pam"), headers)
    # Each event carries the whole record, and receivers order by its timestamps.
    completed = next(e for e in receiver.events() if e["type"] == "job.completed")["data"]
    assert completed["status"] == "succeeded" and completed["output"]["url"].startswith("http")

    def each_request_recorded_once() -> bool:
        # Read both sides afresh: a last progress event may still be on its way.
        ids = [headers["webhook-id"] for headers, _ in receiver.requests]
        assert len(set(ids)) == len(ids)  # one id per event
        return len(attempts(api, job_id)) == len(ids)

    wait_until(each_request_recorded_once, "an attempt recorded for each request received")
    recorded = attempts(api, job_id)
    assert {a["status_code"] for a in recorded} == {200}
    assert all(a["outcome"] == "delivered" and a["latency_ms"] >= 0 for a in recorded)


def test_events_filter_and_replay(
    api: httpx.Client, api_fleet: LocalFleet, receiver: Any, png_data_uri: str
) -> None:
    job_id = submit(api, png_data_uri, receiver.url, webhook_events_filter=["completed"])
    receiver.wait_for(lambda: len(receiver.requests) == 1)
    replay = api.post(f"/v1/jobs/{job_id}/webhook/replay")
    assert replay.status_code == 202 and replay.json()["type"] == "job.completed"
    receiver.wait_for(lambda: len(receiver.requests) == 2)
    (first, _), (again, body) = receiver.requests
    assert again["webhook-id"] == first["webhook-id"] == replay.json()["webhook_id"]
    assert verified(api_fleet.webhook_secrets[1], again, body)["data"]["id"] == job_id
    assert [e["type"] for e in receiver.events()] == ["job.completed"] * 2
    no_hook = api.post("/v1/jobs", json={"image": png_data_uri, "prompt": "pan", **SHORT}).json()
    assert api.post(f"/v1/jobs/{no_hook['id']}/webhook/replay").status_code == 409


def test_receiver_down_for_a_while_then_up(
    api: httpx.Client, png_data_uri: str, make_receiver: Callable[[int], Any]
) -> None:
    with socket.socket() as probe:  # a port nobody listens on, for now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job_id = submit(
        api, png_data_uri, f"http://127.0.0.1:{port}/hook", webhook_events_filter=["completed"]
    )
    wait_until(lambda: len(attempts(api, job_id)) >= 3, "three failed attempts")
    assert all(a["outcome"] == "retry" and a["error"] for a in attempts(api, job_id))
    receiver = make_receiver(port)
    receiver.wait_for(lambda: len(receiver.requests) == 1)
    wait_until(lambda: attempts(api, job_id)[-1]["outcome"] == "delivered", "delivered")
    assert len({a["webhook_id"] for a in attempts(api, job_id)}) == 1  # the same event throughout


def test_gone_410_stops_all_attempts(
    api: httpx.Client, api_fleet: LocalFleet, receiver: Any, png_data_uri: str
) -> None:
    receiver.answers = [(410, {})]
    job_id = submit(api, png_data_uri, receiver.url, webhook_events_filter=["completed"])
    wait_until(lambda: [a["outcome"] for a in attempts(api, job_id)] == ["stopped"], "stopped")
    store = store_client(api_fleet.store_url("api"))
    (delivery,) = store.lrange(WEBHOOK_JOB_KEY + job_id, 0, -1)
    assert store.zscore(WEBHOOK_DUE_SET + "api", delivery) is None  # nothing left to send
    assert len(receiver.requests) == 1


def test_retry_after_is_honoured(api: httpx.Client, receiver: Any, png_data_uri: str) -> None:
    receiver.answers = [(503, {"Retry-After": "2"})]
    submit(api, png_data_uri, receiver.url, webhook_events_filter=["completed"])
    receiver.wait_for(lambda: len(receiver.requests) == 2)
    assert receiver.times[1] - receiver.times[0] >= 1.9  # the schedule alone would say 0.3 s


def test_a_restart_of_the_sender_mid_retries_loses_nothing(
    api: httpx.Client, api_fleet: LocalFleet, receiver: Any, png_data_uri: str
) -> None:
    receiver.answers = [(500, {})] * 1000
    job_id = submit(api, png_data_uri, receiver.url, webhook_events_filter=["completed"])
    receiver.wait_for(lambda: len(receiver.requests) >= 2)
    api_fleet.kill_process("webhooks-api")
    with receiver.lock:
        receiver.answers = []
        failed = len(receiver.requests)
    api_fleet.start_webhooks("api")
    api_fleet.wait_for_webhooks("api")
    receiver.wait_for(lambda: len(receiver.requests) > failed)
    wait_until(lambda: attempts(api, job_id)[-1]["outcome"] == "delivered", "delivered")
    assert len({headers["webhook-id"] for headers, _ in receiver.requests}) == 1
