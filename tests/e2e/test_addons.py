"""Motion add-ons through the HTTP API on real workers serving the shipped student: the MP4
of a job with an add-on shows the add-on's motion; one without shows none; a name the region
does not serve is refused at submit. The image-conditioned ``path`` add-on moves the content
along the path drawn in its control image, which rides with it in the request."""

from __future__ import annotations

import base64
import hashlib
import io
import math
from typing import Any

import av
import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from tools.training.addons.control import ANGLE_TOLERANCE_DEG, angle_error
from tools.training.addons.control_data import draw_path, path_sample
from tools.training.data.addon_motions import AddonMotion, addon_sample
from tools.training.evaluation.frame_metrics import to_uint8
from tools.training.evaluation.motion_estimate import classify_with_addons, estimate

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
        json={"image": image, "prompt": "still", "frames": 8, "size": 64, "seed": 3, **fields},
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


def _data_uri(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _displacement(frames: np.ndarray) -> tuple[float, float]:
    trajectory = estimate(torch.from_numpy(frames))
    return float(trajectory.shift_x[-1]), float(trajectory.shift_y[-1])


def _path(start: tuple[float, float], end: tuple[float, float]) -> str:
    drawn = draw_path(torch.tensor(start), torch.tensor(end), thickness=0.08, head=0.13, faint=0.25)
    return _data_uri((drawn[0].numpy() * 255).round().astype(np.uint8))


def test_a_path_addon_moves_the_content_along_the_drawn_path(api: httpx.Client) -> None:
    image = _data_uri(to_uint8(path_sample(7, heldout=True, size=64).video)[0])
    start, end = (-0.4, 0.3), (0.2, -0.1)
    control = _path(start, end)
    done, frames = _run(api, image, addons=[{"name": "path", "scale": 1.0, "image": control}])
    digest = hashlib.sha256(base64.b64decode(control.split(",", 1)[1])).hexdigest()
    assert done["input"]["addons"] == [{"name": "path", "scale": 1.0, "image_sha256": digest}]
    assert frames.shape == (8, 64, 64, 3)
    along = (end[0] - start[0], end[1] - start[1])
    assert angle_error(_displacement(frames), along) <= ANGLE_TOLERANCE_DEG
    # The same stroke drawn the other way round: the content goes the other way.
    _, reverse = _run(api, image, addons=[{"name": "path", "image": _path(end, start)}])
    assert angle_error(_displacement(reverse), (-along[0], -along[1])) <= ANGLE_TOLERANCE_DEG
    _, still = _run(api, image)
    assert math.hypot(*_displacement(still)) < 0.1  # without it, a still prompt stays still


def test_control_images_are_checked_at_the_edge(api: httpx.Client, png_data_uri: str) -> None:
    cases = [
        ([{"name": "path"}], "addons.0.image", "needs a control image"),
        ([{"name": "shake", "image": png_data_uri}], "addons.0.image", "takes no control image"),
        (
            [{"name": "shake"}, {"name": "path", "image": "data:image/png;base64,AAAA"}],
            "addons.1.image",
            "not a PNG, JPEG or WebP",
        ),
    ]
    for addons, field, message in cases:
        response = api.post(
            "/v1/jobs", json={"image": png_data_uri, "prompt": "still", "addons": addons}
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == field and message in error["message"], error
