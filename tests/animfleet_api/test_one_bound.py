"""One bound changed in the one request model (the maximum frames, edited in a copy of
``animfleet_api/bounds.py`` as a developer would edit it) changes all three places that use
it: the gateway's OpenAPI document and its 422, the dispatcher's validation and the SDK's
request type. No other file states the bound, so they cannot drift apart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATED = "MIN_FRAMES, MAX_FRAMES, DEFAULT_FRAMES = 2, 32, 8"
CHANGED = 12

# Run with the edited contract first on the path: every place reports the frames it accepts.
PROBE = """
import json
from fastapi.testclient import TestClient
from pydantic import ValidationError
from animfleet.topology import Topology
from animfleet_sdk import JobRequest
from dispatcher import Client
from dispatcher.gateway import GatewaySettings, create_app
from dispatcher.inputs import InvalidInput, parse_request

def maximum(schema):
    branches = schema["properties"]["frames"]["anyOf"]
    return next(branch["maximum"] for branch in branches if "maximum" in branch)

def dispatcher_accepts(frames):
    try:
        parse_request(prompt="pan left", frames=frames)
    except InvalidInput as error:
        return error.field
    return True

def sdk_accepts(frames):
    try:
        JobRequest.model_validate({"image": "inputs/a.png", "prompt": "pan", "frames": frames})
    except ValidationError as error:
        first = error.errors()[0]
        return [".".join(map(str, first["loc"])), first["msg"]]
    return True

# Port 9 (discard): nothing answers; a refused body never reaches the broker.
regions = {"local": {"broker_url": "redis://127.0.0.1:9/0"}}
client = Client(Topology.from_mapping({"regions": regions}))
try:
    app = create_app(client, GatewaySettings(region="local", auth=False))
    document = app.openapi()
    body = {"image": "inputs/a.png", "prompt": "pan", "frames": %(over)d}
    refused = TestClient(app).post("/v1/jobs", json=body).json()["error"]
finally:
    client.close()
print(json.dumps({
    "openapi": maximum(document["components"]["schemas"]["JobRequest"]),
    "gateway_refuses": refused,
    "dispatcher": [dispatcher_accepts(%(bound)d), dispatcher_accepts(%(over)d)],
    "sdk_schema": maximum(JobRequest.model_json_schema()),
    "sdk": [sdk_accepts(%(bound)d), sdk_accepts(%(over)d)],
}))
"""


def test_a_changed_bound_reaches_the_gateway_the_dispatcher_and_the_sdk(tmp_path: Path) -> None:
    edited = tmp_path / "animfleet_api"
    shutil.copytree(ROOT / "animfleet_api", edited)
    bounds = edited / "bounds.py"
    assert STATED in bounds.read_text(), "the frames bound moved: update this test's STATED"
    bounds.write_text(
        bounds.read_text().replace(
            STATED, f"MIN_FRAMES, MAX_FRAMES, DEFAULT_FRAMES = 2, {CHANGED}, 8"
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE % {"bound": CHANGED, "over": CHANGED + 1}],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["openapi"] == seen["sdk_schema"] == CHANGED
    assert seen["dispatcher"] == [True, "frames"]
    assert seen["sdk"] == [True, ["frames", f"Input should be less than or equal to {CHANGED}"]]
    refused = seen["gateway_refuses"]
    assert refused["field"] == "frames" and str(CHANGED + 1) in refused["message"]
    assert f"must be at most {CHANGED}" in refused["message"]
