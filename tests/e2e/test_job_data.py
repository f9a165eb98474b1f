"""A job's data end to end: an upload used as the image, the job's log from every process
that touched it (gateway, worker, webhook sender), its log on the live stream, and its
deletion, through a gateway process, GPU workers and a webhook sender on SeaweedFS."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from launcher.local_fleet import LocalFleet
from storage import open_store

pytestmark = pytest.mark.e2e


def _upload(api: httpx.Client, data: bytes) -> str:
    ticket = api.post("/v1/uploads", json={"content_type": "image/png"})
    assert ticket.status_code == 201, ticket.text
    body = ticket.json()
    posted = httpx.post(
        body["url"], data=body["fields"], files={"file": ("photo.png", data, "image/png")}
    )
    assert posted.status_code == 204, posted.text
    key: str = body["key"]
    return key


def test_upload_submit_follow_logs_then_delete(
    api: httpx.Client,
    api_fleet: LocalFleet,
    receiver: Any,
    make_image: Callable[..., bytes],
) -> None:
    key = _upload(api, make_image())
    request = {"image": key, "prompt": "pan left", "width": 64, "height": 64, "frames": 4}
    request |= {"webhook": receiver.url}
    created = api.post("/v1/jobs", json=request, headers={"Idempotency-Key": "erase-me"})
    assert created.status_code in (200, 202), created.text
    job_id = created.json()["id"]

    seen: list[tuple[str, dict[str, Any]]] = []
    with api.stream("GET", f"/v1/jobs/{job_id}/events?logs=true", timeout=90) as stream:
        name = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                seen.append((name, json.loads(line.removeprefix("data: "))))
    assert seen[-1][0] == "succeeded"
    streamed = [data["event"] for name, data in seen if name == "log"]
    assert "job.submitted" in streamed

    receiver.wait_for(lambda: "job.completed" in {e["type"] for e in receiver.events()})
    lines = api.get(f"/v1/jobs/{job_id}/logs").json()["lines"]
    events = [line["event"] for line in lines]
    assert "job.submitted" in events  # the gateway's dispatcher
    assert any(line["fields"].get("worker") for line in lines)  # a worker
    assert any(event.startswith("webhook.") for event in events), events  # the sender
    assert not any("secret" in json.dumps(line).lower() for line in lines)

    job = api.get(f"/v1/jobs/{job_id}").json()
    objects = open_store(api_fleet.topology.region("api").storage)
    assert objects.head(job["output"]["key"]) is not None
    deleted = api.delete(f"/v1/jobs/{job_id}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["objects_deleted"] >= 2  # the output and the upload, at least
    assert objects.head(key) is None and objects.head(job["output"]["key"]) is None
    assert objects.list_keys(f"outputs/{job_id}") == []
    assert api.get(f"/v1/jobs/{job_id}").status_code == 410
    # Its webhook hears of the erasure: the job as it was, without the output that is gone.
    receiver.wait_for(lambda: "job.deleted" in {e["type"] for e in receiver.events()})
    told = next(e for e in receiver.events() if e["type"] == "job.deleted")
    assert told["data"]["id"] == job_id and told["data"]["output"] is None
    # A retried submit cannot recreate it: its upload is gone too.
    again = api.post("/v1/jobs", json=request, headers={"Idempotency-Key": "erase-me"})
    assert again.status_code == 422 and again.json()["error"]["field"] == "image"
