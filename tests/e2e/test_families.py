"""Every image-to-video family end to end: a tiny random-weight checkpoint of each, pushed as a
version, run by a real worker process through the HTTP API; the rules' adjustments and
refusals at submit."""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import numpy.typing as npt
import pytest

from launcher.command import main
from launcher.local_fleet import LocalFleet
from tests.e2e.conftest import API_ENV, SECRETS, Receiver
from tools.families.tiny import build_tiny

pytestmark = pytest.mark.e2e

# name@version -> the tiny checkpoint pushed as it; each family once (Wan as 2.2: it loops).
VERSIONS = {
    "svd@1": "svd",
    "ltx@1": "ltx",
    "ltx-cond@1": "ltx-condition",
    "wan@1": "wan2.2",
    "cogvideox@1": "cogvideox",
}
STEPS = 2
SIDE = 32  # a multiple of every tiny checkpoint's size multiple


@pytest.fixture(scope="module")
def family_fleet(
    tmp_path_factory: pytest.TempPathFactory, shipped_model: Path
) -> Iterator[LocalFleet]:
    """A gateway, webhooks and one worker; every family's tiny checkpoint pushed as a version."""
    root = tmp_path_factory.mktemp("families")
    with LocalFleet(
        root / "fleet",
        regions=("fam",),
        storage="s3",
        model_dir=shipped_model,
        gateway=True,
        webhooks=True,
        service_env={**API_ENV, "ANIMFLEET_TORCH_THREADS": "1"},
        webhook_secrets=SECRETS,
    ) as fleet:
        for ref, name in VERSIONS.items():
            model = build_tiny(name, root / name)
            assert main(["--fleet", str(fleet.fleet_file), "model", "push", str(model), ref]) == 0
        yield fleet


@pytest.fixture
def api(family_fleet: LocalFleet) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=family_fleet.gateway_url(), timeout=90) as http:
        yield http


@pytest.fixture(scope="module")
def image() -> str:
    pixels = np.random.default_rng(7).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def post(api: httpx.Client, image: str, **fields: Any) -> httpx.Response:
    body = {"image": image, "prompt": "pan left", "steps": STEPS, "size": SIDE, **fields}
    return api.post("/v1/jobs", json=body, headers={"Prefer": "wait=60"})


def finished(api: httpx.Client, response: httpx.Response) -> dict[str, Any]:
    assert response.status_code in (200, 202), response.text
    job: dict[str, Any] = response.json()
    deadline = time.monotonic() + 120
    while job["status"] not in ("succeeded", "failed", "canceled", "expired"):
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
        job = api.get(f"/v1/jobs/{job['id']}").json()
    assert job["status"] == "succeeded", job
    return job


def frames_of(job: dict[str, Any]) -> npt.NDArray[np.uint8]:
    video = httpx.get(job["output"]["url"], timeout=10)
    with av.open(io.BytesIO(video.content)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


@pytest.mark.parametrize("ref", list(VERSIONS))
def test_each_family_serves_its_rules_through_the_api(
    api: httpx.Client, image: str, ref: str
) -> None:
    reads_text = VERSIONS[ref] != "svd"
    first = finished(api, post(api, image, model=ref, frames=8, seed=5))
    asked = first["input"]
    assert asked["family"] and asked["model_version"] == ref
    delivered = asked["frames"]
    if VERSIONS[ref] == "svd":  # any count: nothing adjusted
        assert delivered == 8 and asked["adjustments"] == []
    else:  # 4k+1 (the tiny VAEs compress time 4x): the nearest such count, and said so
        assert delivered == 9
        assert asked["adjustments"][0] | {"rule": ""} == {
            "field": "frames",
            "asked": 8,
            "delivered": 9,
            "rule": "",
        }
    frames = frames_of(first)
    assert frames.shape == (delivered, SIDE, SIDE, 3)
    assert first["progress"] == {"step": STEPS, "total": STEPS}
    again = frames_of(finished(api, post(api, image, model=ref, frames=8, seed=5)))
    assert np.array_equal(frames, again), "same seed, same video"
    other = frames_of(finished(api, post(api, image, model=ref, frames=8, seed=5, prompt="zoom")))
    assert np.array_equal(frames, other) != reads_text, "the prompt matters iff the family reads it"


@pytest.mark.parametrize(
    ("ref", "fields", "field", "words"),
    [
        ("cogvideox@1", {"loop": True}, "loop", "cannot condition the last frame"),
        ("ltx@1", {"loop": True}, "loop", "cannot condition the last frame"),
        ("svd@1", {"negative_prompt": "blur"}, "negative_prompt", "reads no text"),
        ("cogvideox@1", {"frames": 16}, "frames", "at most 9 frames"),
    ],
)
def test_what_a_family_cannot_do_is_refused_naming_field_model_and_rule(
    api: httpx.Client, image: str, ref: str, fields: dict[str, Any], field: str, words: str
) -> None:
    response = post(api, image, model=ref, **fields)
    assert response.status_code == 422, response.text
    text = response.text
    assert field in text and ref in text and words in text


def test_stroke_regions_are_refused_on_a_generative_family(
    api: httpx.Client, image: str, make_image: Callable[..., bytes]
) -> None:
    mask = "data:image/png;base64," + base64.b64encode(make_image(48, 48)).decode()
    region = {"mask": mask, "kind": "drift", "stroke": [[0.2, 0.5], [0.8, 0.5]]}
    response = post(api, image, model="ltx@1", regions=[region])
    assert response.status_code == 422 and "procedural brush" in response.text, response.text


def test_a_loop_conditions_the_last_frame_where_the_family_can(
    api: httpx.Client, image: str
) -> None:
    for ref in ("wan@1", "ltx-cond@1"):
        looped = frames_of(finished(api, post(api, image, model=ref, frames=9, loop=True)))
        plain = frames_of(finished(api, post(api, image, model=ref, frames=9)))
        assert looped.shape == plain.shape == (9, SIDE, SIDE, 3)
        assert not np.array_equal(looped, plain)


def test_cancel_mid_job_idempotency_and_webhook(api: httpx.Client, image: str) -> None:
    long = api.post(
        "/v1/jobs",
        json={"image": image, "prompt": "pan", "model": "ltx@1", "steps": 100, "size": 64},
    ).json()
    deadline = time.monotonic() + 60
    while api.get(f"/v1/jobs/{long['id']}").json()["progress"]["step"] < 1:
        assert time.monotonic() < deadline, "the long job never started"
        time.sleep(0.05)
    assert api.post(f"/v1/jobs/{long['id']}/cancel").status_code in (200, 202)
    while (state := api.get(f"/v1/jobs/{long['id']}").json())["status"] != "canceled":
        assert time.monotonic() < deadline + 60, state
        time.sleep(0.05)
    assert state["progress"]["step"] < 100 and state["output"] is None

    receiver = Receiver()
    try:
        body = {"image": image, "prompt": "pan left", "model": "ltx@1", "steps": STEPS}
        body |= {"size": SIDE, "frames": 9, "webhook": receiver.url}
        headers = {"Idempotency-Key": "family-once"}
        one = api.post("/v1/jobs", json=body, headers=headers).json()
        two = api.post("/v1/jobs", json=body, headers=headers).json()
        assert one["id"] == two["id"]
        receiver.wait_for(
            lambda: any(e["type"] == "job.completed" for e in receiver.events()), timeout=60
        )
        completed = next(e for e in receiver.events() if e["type"] == "job.completed")
        assert completed["data"]["id"] == one["id"]
        assert completed["data"]["status"] == "succeeded"
    finally:
        receiver.close()


def test_a_checkpoint_of_no_served_family_is_refused_at_push(
    tmp_path: Path,
    family_fleet: LocalFleet,
    api: httpx.Client,
    image: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = build_tiny("ltx", tmp_path / "odd")
    index = model / "model_index.json"
    index.write_text(index.read_text().replace("LTXImageToVideoPipeline", "MochiPipeline"))
    argv = ["--fleet", str(family_fleet.fleet_file), "model", "push", str(model), "odd@1"]
    assert main(argv) != 0
    said = capsys.readouterr().err
    assert "MochiPipeline" in said and "LTXImageToVideoPipeline" in said, said
    response = post(api, image, model="odd@1")
    assert response.status_code == 422 and "no version 'odd@1'" in response.text  # not pushed
