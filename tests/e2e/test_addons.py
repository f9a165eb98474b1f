"""Motion add-ons through the HTTP API on real workers serving the shipped student: the MP4
of a job with an add-on shows the add-on's motion; one without shows none; a name the region
does not serve is refused at submit."""

from __future__ import annotations

import base64
import io
from typing import Any

import av
import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from tools.training.addon_motions import AddonMotion, addon_sample
from tools.training.metrics import to_uint8
from tools.training.motion_estimate import classify_with_addons

pytestmark = pytest.mark.e2e


def _scene() -> str:
    """A held-out procedural scene (textured, so its motion can be measured)."""
    image = to_uint8(addon_sample(AddonMotion.PULSE, 3, heldout=True, size=64).video)[0]
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _run(api: httpx.Client, image: str, **fields: Any) -> tuple[dict[str, Any], np.ndarray]:
    response = api.post(
        "/v1/jobs",
        json={"image": image, "prompt": "still", "frames": 8, "seed": 3, **fields},
        headers={"Prefer": "wait=60"},
    )
    assert response.status_code == 200, response.text
    done: dict[str, Any] = response.json()
    assert done["status"] == "succeeded", done
    video = httpx.get(done["output"]["url"], timeout=10).content
    with av.open(io.BytesIO(video)) as container:
        frames = [
            f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])
        ]
    return done, np.stack(frames)


def test_a_job_with_an_addon_moves_as_the_addon_teaches(
    api: httpx.Client, png_data_uri: str
) -> None:
    image = _scene()
    pulsed, frames = _run(api, image, addons=[{"name": "pulse", "scale": 1.0}])
    assert pulsed["input"]["addons"] == [{"name": "pulse", "scale": 1.0}]
    assert frames.shape == (8, 64, 64, 3)
    assert classify_with_addons(torch.from_numpy(frames)) == "pulse"
    plain, still = _run(api, image)
    assert plain["input"]["addons"] == []
    assert classify_with_addons(torch.from_numpy(still)) == "static"
    both, _ = _run(api, image, addons=[{"name": "pulse"}, {"name": "shake", "scale": 0.5}])
    assert [a["name"] for a in both["input"]["addons"]] == ["pulse", "shake"]


def test_addons_the_region_does_not_serve_are_refused(api: httpx.Client, png_data_uri: str) -> None:
    response = api.post(
        "/v1/jobs",
        json={"image": png_data_uri, "prompt": "still", "addons": [{"name": "moonwalk"}]},
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "addons" and "moonwalk" in error["message"]
    repeated = api.post(
        "/v1/jobs",
        json={"image": png_data_uri, "prompt": "still", "addons": [{"name": "a"}, {"name": "a"}]},
    )
    assert repeated.status_code == 422
