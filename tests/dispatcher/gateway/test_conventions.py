"""HTTP conventions: named operation ids, a Bearer challenge on 401, RateLimit-* headers where
a rate applies, and a playground curl snippet that runs as shown."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import redis
from PIL import Image

from animfleet.region.tenants import Limits, Tenants
from launcher.local_fleet import LocalFleet

DB = 8
REGION = "cv"
BUCKET = "animfleet-conventions"
OPERATION = re.compile(r"^[a-z]+(?:[A-Z][a-z]+)*$")


@pytest.fixture(scope="module")
def tenants(servers: LocalFleet, s3_gateway: str) -> Tenants:
    return Tenants(redis.Redis(port=servers.redis_port, db=DB))


def test_operations_are_named_for_generated_clients(s3_gateway: str) -> None:
    paths = httpx.get(f"{s3_gateway}/openapi.json").json()["paths"]
    ids = {
        f"{method.upper()} {path}": op["operationId"]
        for path, ops in paths.items()
        for method, op in ops.items()
    }
    assert all(OPERATION.match(name) for name in ids.values()), ids
    assert ids["POST /v1/jobs"] == "createJob" and ids["GET /v1/jobs/{job_id}"] == "getJob"
    assert ids["GET /v1/jobs"] == "listJobs" and ids["DELETE /v1/jobs/{job_id}"] == "deleteJob"
    assert ids["POST /v1/jobs/{job_id}/cancel"] == "cancelJob"
    assert ids["GET /v1/jobs/{job_id}/logs"] == "getJobLogs"
    links = paths["/v1/jobs"]["post"]["responses"]["202"]["links"]  # create -> get -> ...
    linked = {link["operationId"] for link in links.values()}
    assert {"getJob", "getJobLogs", "deleteJob"} <= linked <= set(ids.values())


def test_401_carries_a_bearer_challenge(s3_gateway: str) -> None:
    missing = httpx.get(f"{s3_gateway}/v1/jobs")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="animfleet"'
    wrong = httpx.get(f"{s3_gateway}/v1/jobs", headers={"Authorization": "Bearer af_x_y"})
    assert wrong.headers["www-authenticate"] == 'Bearer realm="animfleet", error="invalid_token"'


def test_rate_limit_headers_count_down_to_the_429(s3_gateway: str, tenants: Tenants) -> None:
    key = tenants.create_key("metered").key
    tenants.set_limits("metered", Limits(rate_per_s=0.1, burst=2))
    auth = {"Authorization": f"Bearer {key}"}
    answers = [httpx.get(f"{s3_gateway}/v1/jobs", headers=auth) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.headers["ratelimit-remaining"] for a in answers] == ["1", "0", "0"]
    assert all(a.headers["ratelimit-limit"] == "2" for a in answers)
    assert 10 <= int(answers[1].headers["ratelimit-reset"]) <= 20
    unmetered = tenants.create_key("free").key
    free = httpx.get(f"{s3_gateway}/v1/jobs", headers={"Authorization": f"Bearer {unmetered}"})
    assert free.status_code == 200 and "ratelimit-limit" not in free.headers


# The playground's own functions, run by Node with the page's inputs stubbed: what it shows.
SNIPPET = """
const values = {prompt: "it's windy", size: "", frames: "8", fps: "8"};
const file = {name: "photo.png", type: "image/png"};
const shown = {};
const $ = (id) => id === "image" ? {files: [file]} : id === "loop" ? {checked: false}
  : id === "curl" ? shown : {value: values[id]};
const regions = [];
const imageUri = "data:image/png;base64,iVBORw0KGgo=";
const location = {origin: process.argv[1]};
%s
%s
showCurl();
process.stdout.write(shown.textContent);
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node to run the page's script")
def test_the_playgrounds_curl_snippet_runs_as_shown(
    s3_gateway: str, tenants: Tenants, tmp_path: Path
) -> None:
    page = httpx.get(f"{s3_gateway}/").text
    functions = [
        re.search(rf"\nfunction {name}\(\) {{\n.*?\n}}\n", page, re.S)
        for name in ("body", "showCurl")
    ]
    assert all(functions)
    script = SNIPPET % tuple(match.group(0) for match in functions if match)
    shown = subprocess.run(
        ["node", "-e", script, s3_gateway], check=True, capture_output=True, text=True
    ).stdout
    assert "…" not in shown and "--data-binary @'photo.png'" in shown
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 120, 40)).save(buffer, format="PNG")
    (tmp_path / "photo.png").write_bytes(buffer.getvalue())
    key = tenants.create_key("curler").key
    ran = subprocess.run(
        ["bash", "-ec", shown],
        cwd=tmp_path,
        env={**os.environ, "ANIMFLEET_API_KEY": key},
        check=True,
        capture_output=True,
        text=True,
    )
    answer = json.loads(ran.stdout)
    assert answer["status"] == "queued" and answer["error"] is None, answer
    assert answer["input"]["prompt"] == "it's windy"


def test_the_playground_serves_its_favicon(s3_gateway: str) -> None:
    page = httpx.get(f"{s3_gateway}/").text
    assert '<link rel="icon" href="/favicon.svg"' in page
    for path in ("/favicon.svg", "/favicon.ico"):  # the second: what browsers ask unprompted
        icon = httpx.get(f"{s3_gateway}{path}")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.content.startswith(b"<svg")


@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"frames": 10_000}, "frames", "frames: must be at most "),
        ({"frames": "eight"}, "frames", "frames: must be an integer (got 'eight')"),
        ({"prompt": None}, "prompt", "prompt: must be a string (got None)"),
        ({"colour": "red"}, "colour", "colour: is not a field of this request"),
        ({"image": "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAA" * 40}, "image", ""),
    ],
)
def test_a_422_names_the_field_in_plain_words_and_never_echoes_image_data(
    s3_gateway: str, tenants: Tenants, changes: dict[str, object], field: str, said: str
) -> None:
    key = tenants.create_key("refused").key
    body = {"image": "data:image/png;base64,iVBORw0KGgo=", "prompt": "pan", **changes}
    answer = httpx.post(
        f"{s3_gateway}/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and error["message"].startswith(said), error
    for pydantic_wording in ("Input should", "Value error", "Field required", "should be"):
        assert pydantic_wording not in error["message"], error
    assert "iVBORw0KGgo" not in error["message"], error  # not a byte of the image
