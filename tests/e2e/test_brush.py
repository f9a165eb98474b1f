"""A brushed job through the HTTP API on real workers serving the shipped student: the region
flows along its stroke, everything well outside it keeps still, the clip loops; the regions'
masks are hashed on the record; a malformed region is refused at submit naming its field.

The MP4 is H.264 (lossy), so stillness is judged against the codec's own rendering of a still
clip, away from the region's soft edge and coded blocks; the exact checks are on the worker's
frames before encoding (tests/workers/model/imaging/test_brush.py, ``animfleet eval --brush``).
"""

from __future__ import annotations

import base64
import hashlib
import io
from typing import Any

import av
import httpx
import numpy as np
import pytest
from PIL import Image

from tools.training.data.photos import photo_uint8
from workers.encode import encode_mp4

pytestmark = pytest.mark.e2e
SIZE = 128
CODEC_SLACK_DB = 1.5
GAP = 16  # soft edge, blocks and the model's residual near the region: not judged


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="PNG")
    return buffer.getvalue()


def _decoded(video: bytes) -> np.ndarray:
    with av.open(io.BytesIO(video)) as container:
        stream = container.streams.video[0]
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    error = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return float(10 * np.log10(255**2 / max(error, 1e-12)))


def test_a_brushed_region_flows_along_its_stroke_and_the_rest_keeps_still(
    api: httpx.Client,
) -> None:
    photo = photo_uint8("rocket")
    image = np.asarray(Image.fromarray(photo).resize((SIZE, SIZE), Image.Resampling.LANCZOS))
    inside = np.zeros((SIZE, SIZE), dtype=bool)
    inside[40:100, 30:100] = True
    mask = _png(inside.astype(np.uint8) * 255)
    body: dict[str, Any] = {
        "image": _data_uri(_png(image)),
        "prompt": "still",
        "size": SIZE,
        "frames": 8,
        "seed": 1,
        "loop": True,
        "regions": [{"mask": _data_uri(mask), "stroke": [[0.3, 0.55], [0.7, 0.55]], "speed": 2}],
    }
    response = api.post("/v1/jobs", json=body, headers={"Prefer": "wait=60"})
    assert response.status_code == 200, response.text
    done = response.json()
    assert done["status"] == "succeeded", done
    region = done["input"]["regions"][0]
    assert region["mask_sha256"] == hashlib.sha256(mask).hexdigest()
    assert region["kind"] == "flow" and done["input"]["loop"] is True
    frames = _decoded(httpx.get(done["output"]["url"], timeout=10).content)
    assert frames.shape == (8, SIZE, SIZE, 3)

    far = np.ones_like(inside)
    far[40 - GAP : 100 + GAP, 30 - GAP : 100 + GAP] = False
    still = _decoded(encode_mp4(np.repeat(image[None], 8, axis=0), 8))
    floor = min(_psnr(frame[far], image[far]) for frame in still) - CODEC_SLACK_DB
    for frame in frames:
        assert _psnr(frame[far], image[far]) >= floor
    # Inside: content moves right about 2 px per frame (best integer shift of the core).
    core = frames[:, 50:90, 45:85].astype(float).mean(-1)
    shifts = []
    for t in range(1, 7):
        errors = {
            dx: np.abs(
                frames[t + 1, 50:90, 45 + dx : 85 + dx].astype(float).mean(-1) - core[t]
            ).mean()
            for dx in range(-4, 5)
        }
        shifts.append(min(errors, key=lambda dx: errors[dx]))
    assert np.median(shifts) == 2, shifts


def test_a_malformed_region_is_refused_naming_its_field(
    api: httpx.Client, png_data_uri: str
) -> None:
    white = _data_uri(_png(np.full((64, 64), 255, dtype=np.uint8)))
    black = _data_uri(_png(np.zeros((64, 64), dtype=np.uint8)))
    for regions, field in (
        ([{"mask": white, "stroke": [[0.1, 0.1], [2.0, 0.1]]}], "regions.0.stroke"),
        ([{"mask": white, "kind": "sway"}], "regions.0.stroke"),
        ([{"mask": white, "kind": "pulse"}, {"mask": black, "kind": "pulse"}], "regions.1.mask"),
        ([{"mask": "data:image/png;base64,@@", "kind": "pulse"}], "regions.0.mask"),
    ):
        body = {"image": png_data_uri, "prompt": "still", "regions": regions}
        response = api.post("/v1/jobs", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field, response.text
