"""The HTTP job API through real HTTP: a gateway process, a webhook sender and two GPU workers."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from animfleet.region.keys import JOB_KEY
from animfleet.region.store_client import store_client
from dispatcher import Client
from launcher.local_fleet import LocalFleet

pytestmark = pytest.mark.e2e

LONG = {"steps": 100, "frames": 32, "size": 128}  # a minute or more on a CPU "GPU": stopped


def submit(
    api: httpx.Client, image: str, headers: dict[str, str] | None = None, **fields: Any
) -> dict[str, Any]:
    response = api.post(
        "/v1/jobs", json={"image": image, "prompt": "pan left", **fields}, headers=headers
    )
    assert response.status_code in (200, 202), response.text
    body: dict[str, Any] = response.json()
    return body


def job(api: httpx.Client, job_id: str) -> dict[str, Any]:
    response = api.get(f"/v1/jobs/{job_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def running(api: httpx.Client, image: str) -> dict[str, Any]:
    """A long job that has started on a GPU."""
    started = submit(api, image, **LONG)
    wait_until(lambda: job(api, started["id"])["progress"]["step"] >= 1, "long job started")
    return started


def test_prefer_wait_returns_the_finished_job_with_a_fresh_output_url(
    api: httpx.Client, png_data_uri: str
) -> None:
    response = api.post(
        "/v1/jobs",
        json={"image": png_data_uri, "prompt": "zoom in", "frames": 4, "metadata": {"order": 7}},
        headers={"Prefer": "wait=60"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["preference-applied"] == "wait=60"
    done = response.json()
    assert done["status"] == "succeeded" and done["metadata"] == {"order": 7}
    assert response.headers["location"] == f"/v1/jobs/{done['id']}"
    metrics = done["metrics"]
    assert all(metrics[name] is not None for name in ("queue_time", "inference_time", "total_time"))
    output = done["output"]
    assert output["content_type"] == "video/mp4" and output["key"].endswith(".mp4")
    video = httpx.get(output["url"], timeout=10)
    assert video.status_code == 200 and len(video.content) == output["bytes"]
    time.sleep(1.1)  # presigned URLs are signed per second: the next one must differ
    again = job(api, done["id"])["output"]
    assert again["url"] != output["url"] and again["expires_at"] > output["expires_at"]


def test_prefer_wait_answers_when_the_time_is_up(api: httpx.Client, png_data_uri: str) -> None:
    started = running(api, png_data_uri)
    before = time.monotonic()
    response = api.get(f"/v1/jobs/{started['id']}", headers={"Prefer": "wait=1"})
    took = time.monotonic() - before
    assert response.status_code == 200 and response.json()["status"] == "running"
    assert response.headers["preference-applied"] == "wait=1"
    assert 0.9 <= took < 5, took
    progress = response.json()["progress"]
    assert 1 <= progress["step"] < progress["total"] == LONG["steps"]


def test_idempotency_key_same_body_same_job_other_body_conflict(
    api: httpx.Client, png_data_uri: str
) -> None:
    key = {"Idempotency-Key": f"order-{uuid.uuid4()}"}
    first = api.post("/v1/jobs", json={"image": png_data_uri, "prompt": "sway"}, headers=key)
    again = api.post("/v1/jobs", json={"image": png_data_uri, "prompt": "sway"}, headers=key)
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert (
        again.headers["idempotent-replayed"] == "true"
        and "idempotent-replayed" not in first.headers
    )
    other = api.post("/v1/jobs", json={"image": png_data_uri, "prompt": "spin"}, headers=key)
    assert other.status_code == 409
    error = other.json()["error"]
    assert error["code"] == "idempotency_conflict" and error["field"] == "Idempotency-Key"
    assert first.json()["id"] in error["message"] and "different request" in error["message"]


def test_put_with_a_client_chosen_id_is_idempotent(api: httpx.Client, png_data_uri: str) -> None:
    job_id = f"render-{uuid.uuid4().hex[:12]}"
    body = {"image": png_data_uri, "prompt": "tilt up", "frames": 4}
    created = api.put(f"/v1/jobs/{job_id}", json=body)
    assert created.status_code == 202 and created.json()["id"] == job_id
    repeated = api.put(f"/v1/jobs/{job_id}", json=body)
    assert repeated.json()["id"] == job_id and repeated.headers["idempotent-replayed"] == "true"
    conflict = api.put(f"/v1/jobs/{job_id}", json={**body, "prompt": "tilt down"})
    assert (
        conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"
    )
    done = api.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=60"}).json()
    assert done["id"] == job_id and done["status"] == "succeeded"
    bad = api.put("/v1/jobs/not%20ok!", json=body)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "id"


def test_cancel_queue_positions_and_the_freed_gpu(api: httpx.Client, png_data_uri: str) -> None:
    long_jobs = [running(api, png_data_uri), running(api, png_data_uri)]  # both GPUs busy
    first, second = (submit(api, png_data_uri, frames=4, steps=4) for _ in range(2))
    assert [job(api, j["id"])["queue_position"] for j in (first, second)] == [0, 1]
    assert job(api, second["id"])["status"] == "queued"

    full = api.post("/v1/jobs", json={"image": png_data_uri, "prompt": "one too many"})
    assert full.status_code == 429, full.text  # two running + two queued is all two GPUs hold
    assert int(full.headers["retry-after"]) >= 1 and full.json()["error"]["code"] == "backlog_full"

    canceled = api.post(f"/v1/jobs/{first['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    assert job(api, second["id"])["queue_position"] == 0  # the job ahead of it left the queue
    third = submit(api, png_data_uri, frames=4, steps=4)
    assert job(api, third["id"])["queue_position"] == 1

    stopped = api.post(f"/v1/jobs/{long_jobs[0]['id']}/cancel").json()
    assert stopped["status"] == "canceled" and stopped["error"]["code"] == "canceled"
    # The freed GPU takes the next job; the one behind it moves up.
    wait_until(lambda: job(api, second["id"])["status"] != "queued", "next job started")
    assert job(api, third["id"])["queue_position"] == 0
    api.post(f"/v1/jobs/{long_jobs[1]['id']}/cancel")
    for queued in (second, third):
        done = api.get(f"/v1/jobs/{queued['id']}", headers={"Prefer": "wait=60"}).json()
        assert done["status"] == "succeeded", done

    wait_until(
        lambda: job(api, long_jobs[0]["id"])["progress"]["step"] < LONG["steps"],
        "record readable",
    )
    assert job(api, long_jobs[0]["id"])["status"] == "canceled"
    never = job(api, first["id"])
    assert never["status"] == "canceled" and never["attempts"] == 0 and never["started_at"] is None


def test_start_deadline_expires_a_queued_job_without_a_gpu(
    api: httpx.Client, api_fleet: LocalFleet, png_data_uri: str
) -> None:
    for _ in range(2):
        running(api, png_data_uri)
    waiting = submit(api, png_data_uri, start_deadline=0.5)
    store = store_client(api_fleet.store_url("api"))

    def expired_in_redis() -> bool:  # not through the gateway, whose reads would expire it too
        raw = store.get(JOB_KEY + waiting["id"])
        return raw is not None and json.loads(raw)["status"] == "expired"

    wait_until(expired_in_redis, "webhooks process expired the job", timeout=15)
    record = job(api, waiting["id"])
    assert record["error"]["code"] == "start_deadline_exceeded"
    assert record["attempts"] == 0 and record["started_at"] is None


def test_deadline_stops_a_running_job(api: httpx.Client, png_data_uri: str) -> None:
    late = submit(api, png_data_uri, deadline=2, **LONG)
    done = api.get(f"/v1/jobs/{late['id']}", headers={"Prefer": "wait=30"}).json()
    assert done["status"] == "canceled" and done["error"]["code"] == "deadline_exceeded"
    assert done["started_at"] is not None and done["progress"]["step"] < LONG["steps"]


def test_regions_report_live_and_busy_workers(api: httpx.Client, png_data_uri: str) -> None:
    running(api, png_data_uri)
    regions = api.get("/v1/regions").json()["regions"]
    assert regions == [
        {
            "name": "api",
            "live_workers": 2,
            "busy_workers": 1,
            "queue_depth": 0,
            "backlog": 0,
            "scaling_signal": 0.5,
        }
    ]


@pytest.fixture
def image_server(make_image: Callable[..., bytes]) -> Iterator[str]:
    """Serves a PNG at /image.png and redirects /to-metadata to the cloud metadata address."""
    png = make_image()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/image.png":
                self.send_response(200)
                self.send_header("content-length", str(len(png)))
                self.end_headers()
                self.wfile.write(png)
            else:
                self.send_response(302)
                self.send_header("location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("content-length", "0")
                self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_image_urls_are_fetched_behind_the_guard(
    api: httpx.Client, image_server: str, png_data_uri: str
) -> None:
    fetched = submit(api, f"{image_server}/image.png", frames=4)
    done = api.get(f"/v1/jobs/{fetched['id']}", headers={"Prefer": "wait=60"}).json()
    assert done["status"] == "succeeded"
    refused = {
        f"{image_server}/to-metadata": "image",
        "http://169.254.169.254/latest/meta-data/": "image",
        "http://[::ffff:10.0.0.1]/a.png": "image",
    }
    for url, field in refused.items():
        response = api.post("/v1/jobs", json={"image": url, "prompt": "pan"})
        assert response.status_code == 422, url
        assert response.json()["error"]["field"] == field
        assert "not a public internet address" in response.json()["error"]["message"], url
    hook = api.post(
        "/v1/jobs", json={"image": png_data_uri, "prompt": "pan", "webhook": "http://10.1.2.3/"}
    )
    assert hook.status_code == 422 and hook.json()["error"]["field"] == "webhook"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"prompt": "pan"}, 422, "image"),
        ({"image": "data:image/png;base64,AAAA", "prompt": "pan"}, 422, "image"),
        ({"image": "PNG", "prompt": "pan", "frames": 99}, 422, "image"),
        ({"image": "inputs/none.png", "prompt": "pan"}, 422, "image"),
    ],
)
def test_errors_name_the_field(
    api: httpx.Client, body: dict[str, Any], status: int, field: str
) -> None:
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == status
    assert response.json()["error"]["field"] == field and response.json()["error"]["message"]


def test_out_of_range_values_and_unknown_jobs(api: httpx.Client, png_data_uri: str) -> None:
    response = api.post("/v1/jobs", json={"image": png_data_uri, "prompt": "pan", "frames": 99})
    assert response.status_code == 422 and response.json()["error"]["field"] == "frames"
    assert "99" in response.json()["error"]["message"]
    missing = api.get("/v1/jobs/api.0123456789abcdef")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert api.post("/v1/jobs/nope/cancel").status_code == 404


def test_python_client_parity(api_fleet: LocalFleet, make_image: Callable[..., bytes]) -> None:
    client = Client(api_fleet.topology)
    try:
        key = f"py-{uuid.uuid4()}"
        options: dict[str, Any] = {
            "home_region": "api",
            "idempotency_key": key,
            "webhook_events_filter": ["completed"],
            "start_deadline": 60,
            "deadline": 120,
            "steps": 100,
        }
        handle = client.submit(make_image(), "pan", **options)
        assert client.submit(make_image(), "pan", **options).id == handle.id
        record = client.get(handle.id)
        assert record.deadline is not None and record.start_deadline is not None
        assert record.webhook_events == ["completed"]
        assert client.cancel(handle.id).status.value == "canceled"
        assert client.wait(handle.id, timeout=5).error.code == "canceled"  # type: ignore[union-attr]
    finally:
        client.close()
