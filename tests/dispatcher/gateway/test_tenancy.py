"""API keys, listing, live events and the body cap, through a gateway in this process.

The region has no GPUs: jobs are written as a worker would leave them, so each test drives the
states it needs without waiting on a model.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
import redis
from PIL import Image
from pydantic import BaseModel

from animfleet.jobs import JobOutput, JobParams, JobProgress, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.catalog import CatalogEntry, ModelCatalog
from animfleet.region.deployments import Deployment, Deployments
from animfleet.region.jobstore import JobStore
from animfleet.region.tenants import Limits, Tenants
from animfleet.topology import Topology
from animfleet_api.bounds import MAX_PROMPT_CHARS
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.gateway import GatewaySettings
from launcher.local_fleet import LocalFleet

DB = 13
PARAMS = JobParams(prompt="pan", frames=8, fps=8, width=64, height=64, seed=1)


@pytest.fixture(scope="module")
def gateway(
    servers: LocalFleet,
    tmp_path_factory: pytest.TempPathFactory,
    serve: Callable[[Client, GatewaySettings], AbstractContextManager[str]],
) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("tenancy-storage")
    topology = Topology.from_mapping(
        {
            "regions": {
                "tn": {
                    "broker_url": f"redis://127.0.0.1:{servers.redis_port}/{DB}",
                    "storage": {"backend": "local", "root": str(root)},
                }
            }
        },
        env={},
    )
    redis.Redis(port=servers.redis_port, db=DB).flushdb()
    client = Client(topology, admission=AdmissionSettings(retry_budget_s=0.0, max_attempts=1))
    settings = GatewaySettings(
        region="tn", max_body_bytes=64 * 1024, events_poll_s=0.05, events_heartbeat_s=0.5
    )
    with serve(client, settings) as url:
        yield url


@pytest.fixture
def db(servers: LocalFleet) -> redis.Redis:
    """The region's database, empty: a job left queued by an earlier test would stand ahead
    of this test's jobs in the queue (their event ids count the jobs ahead)."""
    client = redis.Redis(port=servers.redis_port, db=DB)
    client.flushdb()
    return client


def _job(db: redis.Redis, tenant: str, created_at: float | None = None) -> JobRecord:
    record = JobRecord(
        id=new_job_id("tn"), region="tn", home_region="tn", params=PARAMS, tenant=tenant
    )
    if created_at is not None:
        record.created_at = created_at
    seed(db, record, b"image", index=True)
    return record


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_are_required_checked_revocable_and_rate_limited(
    gateway: str, db: redis.Redis
) -> None:
    tenants = Tenants(db)
    key = tenants.create_key("acme").key
    assert httpx.get(f"{gateway}/v1/jobs").status_code == 401
    bad = httpx.get(f"{gateway}/v1/jobs", headers=_auth(key[:-1] + "x"))
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthenticated"
    assert key not in bad.text
    assert httpx.get(f"{gateway}/v1/jobs", headers=_auth(key)).status_code == 200
    assert httpx.get(f"{gateway}/healthz").status_code == 200
    page = httpx.get(f"{gateway}/")  # the playground page, its prompt bounded as the API's
    assert page.status_code == 200 and f'maxlength="{MAX_PROMPT_CHARS}"' in page.text
    schema = httpx.get(f"{gateway}/openapi.json").json()
    assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"

    limited = tenants.create_key("slow").key
    tenants.set_limits("slow", Limits(rate_per_s=0.2, burst=2))
    codes = [httpx.get(f"{gateway}/v1/jobs", headers=_auth(limited)) for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert 1 <= int(codes[2].headers["retry-after"]) <= 5
    assert codes[2].json()["error"]["code"] == "rate_limited"

    key_id = key.split("_")[1]
    tenants.revoke(key_id)
    revoked = httpx.get(f"{gateway}/v1/jobs", headers=_auth(key))
    assert revoked.status_code == 401 and revoked.json()["error"]["code"] == "key_revoked"


def test_listing_is_per_tenant_newest_first_and_pages_stay_stable(
    gateway: str, db: redis.Redis
) -> None:
    tenants = Tenants(db)
    mine, theirs = tenants.create_key("lister").key, tenants.create_key("other").key
    now = time.time()
    made = [_job(db, "lister", now + i) for i in range(5)]
    _job(db, "other", now + 2)
    first = httpx.get(f"{gateway}/v1/jobs", params={"limit": 2}, headers=_auth(mine)).json()
    assert [j["id"] for j in first["jobs"]] == [made[4].id, made[3].id]
    _job(db, "lister", now + 10)  # a new job between pages shifts nothing
    second = httpx.get(
        f"{gateway}/v1/jobs",
        params={"limit": 2, "cursor": first["next_cursor"]},
        headers=_auth(mine),
    ).json()
    assert [j["id"] for j in second["jobs"]] == [made[2].id, made[1].id]
    JobStore(db).update(made[0].id, lambda r: r.end(JobState.CANCELED, "canceled", "test"))
    canceled = httpx.get(
        f"{gateway}/v1/jobs", params={"status": "canceled"}, headers=_auth(mine)
    ).json()
    assert [j["id"] for j in canceled["jobs"]] == [made[0].id] and not canceled["next_cursor"]
    other = httpx.get(f"{gateway}/v1/jobs", headers=_auth(theirs)).json()
    assert len(other["jobs"]) == 1 and other["jobs"][0]["id"] not in {m.id for m in made}
    bad = httpx.get(f"{gateway}/v1/jobs", params={"cursor": "zzz"}, headers=_auth(mine))
    assert bad.status_code == 404 and bad.json()["error"]["field"] == "cursor"  # no such page
    ugly = httpx.get(f"{gateway}/v1/jobs", params={"cursor": "not/base64"}, headers=_auth(mine))
    assert ugly.status_code == 422 and ugly.json()["error"]["field"] == "cursor"


def _read_events(
    response: httpx.Response,
    stop_after: int | None = None,
    after_first: Callable[[], None] | None = None,
) -> list[tuple[str, str, dict[str, object]]]:
    """Events until ``stop_after`` (or the end); ``after_first`` runs once the first arrived."""
    events: list[tuple[str, str, dict[str, object]]] = []
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                events.append((fields.get("id", ""), fields["event"], json.loads(fields["data"])))
                if len(events) == 1 and after_first is not None:
                    after_first()
                if stop_after is not None and len(events) == stop_after:
                    return events
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
    return events


def test_events_follow_a_job_in_order_and_resume_after_the_last_id(
    gateway: str, db: redis.Redis
) -> None:
    tenants = Tenants(db)
    key, stranger = tenants.create_key("watcher").key, tenants.create_key("stranger").key
    job = _job(db, "watcher")
    store = JobStore(db)
    url = f"{gateway}/v1/jobs/{job.id}/events"
    assert httpx.get(url, headers=_auth(stranger)).status_code == 404
    assert httpx.get(f"{gateway}/v1/jobs/tn.0000/events", headers=_auth(key)).status_code == 404

    def advance(step: int) -> Callable[[JobRecord], None]:
        def change(record: JobRecord) -> None:
            record.progress = JobProgress(step=step, total=4)

        return change

    def work() -> None:  # what a worker does; the stream may see any subset of the changes
        store.update(job.id, lambda r: r.transition(JobState.RUNNING))
        for step in range(1, 5):
            store.update(job.id, advance(step))

    worker = threading.Thread(target=work)
    with httpx.stream("GET", url, headers=_auth(key), timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        # The job runs once the stream has shown it queued (a loaded machine could otherwise
        # start it before the stream's first read, which then never sees it queued).
        seen = _read_events(response, stop_after=3, after_first=worker.start)
    worker.join()
    assert [e[1] for e in seen] == ["queued", "started", "progress"]

    def finish(record: JobRecord) -> None:
        record.output = JobOutput(
            key="outputs/x.mp4", bytes=10, frames=8, fps=8, width=64, height=64
        )
        record.transition(JobState.SUCCEEDED)

    store.update(job.id, finish)
    resumed_headers = {**_auth(key), "Last-Event-ID": seen[-1][0]}
    with httpx.stream("GET", url, headers=resumed_headers, timeout=30) as response:
        rest = _read_events(response)
    ids = [e[0] for e in seen + rest]
    assert ids == ["queued-0", "started", "step-1", "step-2", "step-3", "step-4", "end"]
    output = rest[-1][2]["output"]
    assert rest[-1][1] == "succeeded" and isinstance(output, dict)
    assert output["key"] == "outputs/x.mp4"


def test_a_body_past_the_cap_is_refused_before_it_is_read(gateway: str, db: redis.Redis) -> None:
    key = Tenants(db).create_key("big").key
    declared = httpx.post(
        f"{gateway}/v1/jobs", content=b"{" + b" " * 70_000 + b"}", headers=_auth(key)
    )
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:
        yield b'{"prompt": "'
        for _ in range(100):
            yield b"x" * 1024

    streamed = httpx.post(
        f"{gateway}/v1/jobs",
        content=chunks(),
        headers={**_auth(key), "content-type": "application/json"},
    )
    assert streamed.status_code == 413, streamed.text


def test_the_sdk_models_match_the_openapi_document(gateway: str) -> None:
    from animfleet_sdk import DayUsage, DeletedJob, Job, JobLog, JobPage, LogEntry, StoredUpload
    from animfleet_sdk.responses import BatchResult, Output, PresignedUpload, Usage

    schemas = httpx.get(f"{gateway}/openapi.json").json()["components"]["schemas"]
    models: list[tuple[type[BaseModel], str]] = [
        (Job, "JobView"),
        (Output, "OutputView"),
        (JobPage, "JobList"),
        (BatchResult, "BatchResult"),
        (PresignedUpload, "PresignedUpload"),
        (StoredUpload, "StoredUpload"),
        (LogEntry, "LogEntry"),
        (JobLog, "JobLog"),
        (DeletedJob, "DeletedJob"),
        (DayUsage, "DayUsage"),
        (Usage, "Usage"),
    ]
    for model, name in models:
        fields = {field.alias or attr for attr, field in model.model_fields.items()}
        assert fields == set(schemas[name]["properties"]), name


def test_the_sdk_lists_streams_and_reports_errors(gateway: str, db: redis.Redis) -> None:
    from animfleet_sdk import Animfleet, RequestRefused

    key = Tenants(db).create_key("sdk").key
    jobs = [_job(db, "sdk") for _ in range(3)]
    with Animfleet(gateway, api_key=key) as api:
        assert [j.id for j in api.iter_jobs(limit=2)] == [j.id for j in reversed(jobs)]
        JobStore(db).update(jobs[0].id, lambda r: r.end(JobState.CANCELED, "canceled", "t"))
        events = list(api.stream(jobs[0].id))
        assert [e.event for e in events] == ["queued", "canceled"]
        assert events[-1].job is not None and events[-1].job.status == "canceled"
        with pytest.raises(RequestRefused) as missing:
            api.stream(jobs[0].id + "0").__next__()
        assert missing.value.status == 404
    with Animfleet(gateway, api_key="af_0000000000000000_" + "x" * 43) as stranger:
        with pytest.raises(RequestRefused) as refused:
            stranger.list()
        assert refused.value.status == 401 and refused.value.code == "unauthenticated"


def test_the_sdk_waits_out_retry_after(gateway: str, db: redis.Redis) -> None:
    from animfleet_sdk import Animfleet

    tenants = Tenants(db)
    key = tenants.create_key("paced").key
    tenants.set_limits("paced", Limits(rate_per_s=2, burst=1))
    started = time.monotonic()
    with Animfleet(gateway, api_key=key) as api:
        pages = [api.list() for _ in range(3)]  # the 2nd and 3rd wait for a token
    assert all(page.jobs == [] for page in pages)
    assert time.monotonic() - started >= 0.5


def test_the_contract_fixes(gateway: str, db: redis.Redis) -> None:
    key = Tenants(db).create_key("contract").key
    options = httpx.options(f"{gateway}/v1/jobs/tn.0000")
    assert options.status_code == 204 and options.headers["allow"] == "GET, PUT, DELETE, OPTIONS"
    malformed = httpx.post(
        f"{gateway}/v1/jobs",
        content=b'{"prompt": ',
        headers={**_auth(key), "content-type": "application/json"},
    )
    assert malformed.status_code == 400 and malformed.json()["error"]["field"] == "body"
    schema = httpx.get(f"{gateway}/openapi.json").json()
    submit = schema["paths"]["/v1/jobs"]["post"]
    assert {"200", "202", "400", "401", "413", "429"} <= set(submit["responses"])
    assert "Location" in submit["responses"]["202"]["headers"]
    assert "Retry-After" in submit["responses"]["429"]["headers"]
    assert submit["security"] == [{"ApiKey": []}]
    fields = schema["components"]["schemas"]["JobRequest"]["properties"]
    assert _bound(fields["frames"], "maximum") == 32 and fields["prompt"]["maxLength"] == 500
    assert _bound(fields["priority"], "maximum") == 9 and fields["image"]["minLength"] == 1


def _bound(field: dict[str, Any], name: str) -> Any:
    """A constraint of an optional field: on the field, or on its non-null ``anyOf`` branch."""
    if name in field:
        return field[name]
    return next(branch[name] for branch in field.get("anyOf", []) if name in branch)


def _png_uri() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (40, 90, 160)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_a_tenants_in_flight_limit_and_backlog_cap_hold(gateway: str, db: redis.Redis) -> None:
    # The region has no GPU: every accepted job waits in its backlog, in flight until it ends.
    tenants = Tenants(db)
    body = {"image": _png_uri(), "prompt": "pan left"}
    busy = _auth(tenants.create_key("busy").key)
    tenants.set_limits("busy", Limits(in_flight=2))
    first, second = (httpx.post(f"{gateway}/v1/jobs", json=body, headers=busy) for _ in range(2))
    assert (first.status_code, second.status_code) == (202, 202)
    refused = httpx.post(f"{gateway}/v1/jobs", json=body, headers=busy)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "in_flight_limit"
    assert int(refused.headers["retry-after"]) >= 1
    batch = httpx.post(f"{gateway}/v1/jobs/batch", json={"jobs": [body]}, headers=busy)
    assert batch.status_code == 429  # a batch counts in full
    canceled = httpx.post(f"{gateway}/v1/jobs/{first.json()['id']}/cancel", headers=busy)
    assert canceled.json()["status"] == "canceled"
    third = httpx.post(f"{gateway}/v1/jobs", json=body, headers=busy)
    assert third.status_code == 202  # one ended: room for one more

    capped = _auth(tenants.create_key("capped").key)
    tenants.set_limits("capped", Limits(backlog_cap=1))
    waiting = httpx.post(f"{gateway}/v1/jobs", json=body, headers=capped)
    over = httpx.post(f"{gateway}/v1/jobs", json=body, headers=capped)
    assert waiting.status_code == 202
    assert over.status_code == 429 and over.json()["error"]["code"] == "backlog_full"

    for job, headers in ((second, busy), (third, busy), (waiting, capped)):
        httpx.post(f"{gateway}/v1/jobs/{job.json()['id']}/cancel", headers=headers)


def test_models_list_what_a_job_may_ask_for_and_jobs_name_their_version(
    gateway: str, db: redis.Redis
) -> None:
    ModelCatalog(db, "tn").add(CatalogEntry(ref="anim@1", hash="a" * 64, bytes=10, files=2))
    Deployments(db, "tn").put(Deployment(name="web", versions={"anim@1": 1.0}, stable="anim@1"))
    caller = _auth(Tenants(db).create_key("versions").key)
    assert httpx.get(f"{gateway}/v1/models").status_code == 401
    models = httpx.get(f"{gateway}/v1/models", headers=caller).json()
    assert models["default"] is None and models["versions"][0]["ref"] == "anim@1"
    assert models["deployments"] == [
        {"name": "web", "stable": "anim@1", "weights": {"anim@1": 1.0}, "updated_at": ANY}
    ]
    body = {"image": _png_uri(), "prompt": "pan left"}
    for model in ("web", "anim@1"):
        job = httpx.post(f"{gateway}/v1/jobs", json={**body, "model": model}, headers=caller)
        assert job.status_code == 202, job.text
        assert job.json()["model_version"] == "anim@1" and job.json()["input"]["model"] == model
    unknown = httpx.post(f"{gateway}/v1/jobs", json={**body, "model": "anim@7"}, headers=caller)
    assert unknown.status_code == 422
    assert unknown.json()["error"]["field"] == "model"
    assert "no version 'anim@7'" in unknown.json()["error"]["message"]
