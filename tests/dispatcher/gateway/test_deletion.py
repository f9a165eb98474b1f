"""Deleting a job and reading its log, through a gateway in this process on real SeaweedFS.

The region has no GPUs: jobs are written as a worker would leave them (outputs per run, an
archived copy, log lines), so each test sees exactly what a deletion must remove.
"""

from __future__ import annotations

import base64
import csv
import io
import time
from pathlib import Path

import httpx
import pytest
import redis
from PIL import Image

from animfleet.jobs import JobOutput, JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.archive import RecordArchive
from animfleet.region.erasure import Erasure
from animfleet.region.joblogs import JobLogs
from animfleet.region.jobstore import JobStore
from animfleet.region.tenants import Tenants
from animfleet.region.usage import LAG_S, UsageBook, day_of
from animfleet.topology import Topology
from launcher.command import main
from launcher.local_fleet import LocalFleet
from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY
from storage import ObjectStore, output_key

DB = 9
REGION = "dl"
BUCKET = "animfleet-deletion"
PARAMS = JobParams(prompt="pan", frames=8, fps=8, width=64, height=64, seed=1)


@pytest.fixture(scope="module")
def db(servers: LocalFleet) -> redis.Redis:
    return redis.Redis(port=servers.redis_port, db=DB)


@pytest.fixture(scope="module")
def keys(db: redis.Redis, s3_gateway: str) -> dict[str, str]:
    tenants = Tenants(db)
    return {t: tenants.create_key(t).key for t in ("acme", "globex")}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _queued(db: redis.Redis, tenant: str = "acme") -> JobRecord:
    record = JobRecord(
        id=new_job_id(REGION), region=REGION, home_region=REGION, params=PARAMS, tenant=tenant
    )
    seed(db, record, b"image", index=True)
    return record


def _finished(
    db: redis.Redis, s3_store: ObjectStore, tenant: str = "acme"
) -> tuple[JobRecord, list[str]]:
    """A job that ran twice (a lost first run left its object) and succeeded, archived too,
    from an upload; with the keys of every object it has."""
    record = _queued(db, tenant)
    keys = [output_key("", record.id, "run1"), output_key("", record.id, "run2")]
    upload = f"inputs/uploads/{tenant}/photo.png"
    for key in [*keys, upload]:
        s3_store.put(key, b"bytes", "video/mp4")
    Erasure(db).note_uploads(record.id, [upload])
    output = JobOutput(key=keys[1], bytes=5, frames=8, fps=8, width=64, height=64)

    def succeed(current: JobRecord) -> None:
        current.transition(JobState.RUNNING)
        current.output = output
        current.transition(JobState.SUCCEEDED)

    finished = JobStore(db).update(record.id, succeed)
    RecordArchive(s3_store).put(finished)
    JobLogs(db).append(record.id, {"event": "job.submitted", "level": "info", "region": REGION})
    return finished, [*keys, upload, RecordArchive(s3_store).key(record.id)]


def test_delete_erases_outputs_uploads_archive_record_and_log(
    s3_gateway: str, keys: dict[str, str], db: redis.Redis, s3_store: ObjectStore
) -> None:
    record, objects = _finished(db, s3_store)
    url = f"{s3_gateway}/v1/jobs/{record.id}"
    assert httpx.delete(url, headers=_auth(keys["globex"])).status_code == 404
    answer = httpx.delete(url, headers=_auth(keys["acme"]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "succeeded" and answer.json()["objects_deleted"] == 4
    assert [key for key in objects if s3_store.head(key) is not None] == []
    assert JobLogs(db).read(record.id) == [] and JobStore(db).input_image(record.id) is None
    gone = httpx.get(url, headers=_auth(keys["acme"]))
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "deleted"
    assert httpx.get(f"{url}/logs", headers=_auth(keys["acme"])).status_code == 410
    assert httpx.get(url, headers=_auth(keys["globex"])).status_code == 404  # not theirs
    listed = httpx.get(f"{s3_gateway}/v1/jobs", headers=_auth(keys["acme"])).json()["jobs"]
    assert record.id not in [job["id"] for job in listed]
    assert httpx.delete(url, headers=_auth(keys["acme"])).status_code == 410


def test_a_job_not_yet_ended_is_canceled_then_deleted(
    s3_gateway: str, keys: dict[str, str], db: redis.Redis
) -> None:
    record = _queued(db)
    answer = httpx.delete(f"{s3_gateway}/v1/jobs/{record.id}", headers=_auth(keys["acme"]))
    assert answer.status_code == 200 and answer.json()["status"] == "canceled"
    assert db.zscore(f"{{animfleet}}:queued:{REGION}", record.id) is None


def test_a_jobs_log_is_its_tenants_only_and_streams_as_log_events(
    s3_gateway: str, keys: dict[str, str], db: redis.Redis
) -> None:
    record = _queued(db)
    logs = JobLogs(db)
    logs.append(record.id, {"event": "job.submitted", "level": "info", "timestamp": "t1"})
    logs.append(record.id, {"event": "job.slow", "level": "warning", "timestamp": "t2", "n": 3})
    url = f"{s3_gateway}/v1/jobs/{record.id}/logs"
    assert httpx.get(url, headers=_auth(keys["globex"])).status_code == 404
    lines = httpx.get(url, headers=_auth(keys["acme"])).json()["lines"]
    assert [(line["event"], line["seq"], line["region"]) for line in lines] == [
        ("job.submitted", 1, REGION),
        ("job.slow", 2, REGION),
    ]
    assert lines[1]["fields"] == {"n": 3} and lines[1]["level"] == "warning"
    warnings = httpx.get(url, params={"level": "warning"}, headers=_auth(keys["acme"])).json()
    assert [line["event"] for line in warnings["lines"]] == ["job.slow"]

    JobStore(db).update(record.id, lambda r: r.end(JobState.CANCELED, "canceled", "test"))
    events = f"{s3_gateway}/v1/jobs/{record.id}/events?logs=true"

    def names(url: str) -> list[str]:
        with httpx.stream("GET", url, headers=_auth(keys["acme"]), timeout=30) as response:
            lines = list(response.iter_lines())
        return [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]

    assert names(events)[:2] == ["log", "log"] and names(events)[-1] == "canceled"
    assert "log" not in names(events.removesuffix("?logs=true"))  # logs: when asked


def test_a_retried_submit_of_a_deleted_job_answers_deleted(
    s3_gateway: str, keys: dict[str, str]
) -> None:
    image = base64.b64encode(_png()).decode()
    request = {"image": f"data:image/png;base64,{image}", "prompt": "pan", "width": 64}
    headers = {**_auth(keys["acme"]), "Idempotency-Key": "once"}
    created = httpx.post(f"{s3_gateway}/v1/jobs", json=request, headers=headers)
    assert created.status_code == 202, created.text
    job = f"{s3_gateway}/v1/jobs/{created.json()['id']}"
    assert httpx.delete(job, headers=_auth(keys["acme"])).status_code == 200
    again = httpx.post(f"{s3_gateway}/v1/jobs", json=request, headers=headers)
    assert again.status_code == 410 and again.json()["error"]["code"] == "deleted", again.text
    other = httpx.post(
        f"{s3_gateway}/v1/jobs",
        json=request,
        headers={**_auth(keys["globex"]), "Idempotency-Key": "once"},
    )
    assert other.status_code == 202  # keys are per tenant: another tenant's "once" is new


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (40, 90, 160)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_usage_counts_jobs_and_deletions_by_day_in_the_api_and_the_cli(
    s3_gateway: str,
    s3_store: ObjectStore,
    s3_topology: Topology,
    db: redis.Redis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = Tenants(db).create_key("counted").key
    book = UsageBook(JobStore(db), REGION, s3_store)
    _finished(db, s3_store, "counted")
    gone, _ = _finished(db, s3_store, "counted")
    book.roll_up(time.time() + LAG_S)  # what the region's sweeper does each pass
    assert httpx.delete(f"{s3_gateway}/v1/jobs/{gone.id}", headers=_auth(key)).status_code == 200
    book.roll_up(time.time() + LAG_S)
    today = day_of(time.time())
    usage = httpx.get(f"{s3_gateway}/v1/usage", params={"from": today}, headers=_auth(key))
    assert usage.status_code == 200, usage.text
    body = usage.json()
    assert body["from"] == body["to"] == today and len(body["days"]) == 1
    assert body["total"]["jobs"]["succeeded"] == 2 and body["total"]["deleted"] == 1
    assert body["total"]["output_bytes"] == 10 and body["total"]["frame_pixels"] == 2 * 8 * 64 * 64
    bad = httpx.get(f"{s3_gateway}/v1/usage", params={"from": "2026-02-30"}, headers=_auth(key))
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "from"

    storage = s3_topology.region(REGION).storage
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f'[regions.{REGION}]\nbroker_url = "{s3_topology.region(REGION).broker_url}"\n'
        f"[regions.{REGION}.storage]\n"
        f'backend = "s3"\nbucket = "{storage.bucket}"\nendpoint_url = "{storage.endpoint_url}"\n'
        f'access_key_id = "{S3_ACCESS_KEY}"\nsecret_access_key = "{S3_SECRET_KEY}"\n'
    )
    capsys.readouterr()  # what the gateway in this process logged so far
    assert main(["--fleet", str(fleet), "usage", "--tenant", "counted", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["day"], r["succeeded"], r["deleted"]) for r in rows] == [(today, "2", "1")]
