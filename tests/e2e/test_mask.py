"""A masked job through the HTTP API on real workers serving the shipped student: outside the
mask the MP4 shows the input image in every frame, inside it the prompted motion; a mask that
animates nothing is refused at submit, naming the field.

The MP4 is H.264 in yuv420p, which is lossy (chroma at half resolution, DCT blocks that bleed
across the mask's edge), so here the unmasked pixels are compared with a tolerance, away from
the mask's blocks; the exact check is on the worker's frames before encoding
(tests/workers/model/imaging/test_templates.py and ``make bench-mask``).
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
import torch
import torch.nn.functional as F
from PIL import Image

from tools.training.data.scenes import heldout_sample
from tools.training.evaluation.frame_metrics import to_uint8
from tools.training.evaluation.mask_scenes import KINDS, classify_inside, mask_png, scene_mask
from workers.encode import encode_mp4
from workers.model.imaging.mask import mask_region

pytestmark = pytest.mark.e2e
# The background may come back at most this much worse than H.264 (the worker's encoder and
# settings) brings back the input image as a still clip: yuv420p halves chroma, so sharp
# coloured edges lose ~30 dB either way.
CODEC_SLACK_DB = 1.5
GAP = 8  # pixels this near the mask may share a coded block with moving ones: not judged


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="PNG")
    return buffer.getvalue()


def _psnr(frame: np.ndarray, image: np.ndarray) -> float:
    error = np.mean((frame.astype(float) - image.astype(float)) ** 2)
    return float(10 * np.log10(255**2 / max(error, 1e-12)))


def _frames(url: str) -> np.ndarray:
    return _decoded(httpx.get(url, timeout=10).content)


def _decoded(video: bytes) -> np.ndarray:
    with av.open(io.BytesIO(video)) as container:
        frames = [
            f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])
        ]
    return np.stack(frames)


def test_a_masked_job_keeps_the_image_outside_the_mask_and_moves_inside(api: httpx.Client) -> None:
    sample = heldout_sample("zoom", 2, size=64, num_frames=8)
    image = to_uint8(sample.video)[0]
    inside = scene_mask(5, 0.2, 64, KINDS.index("circle"))
    mask = mask_png(inside)
    body: dict[str, Any] = {
        "image": _data_uri(_png(image)),
        "mask": _data_uri(mask),
        "prompt": sample.prompt,
        "frames": 8,
        "size": 64,  # the model's own size (the default is 512 px on the long side)
        "seed": 4,
    }
    response = api.post("/v1/jobs", json=body, headers={"Prefer": "wait=60"})
    assert response.status_code == 200, response.text
    done = response.json()
    assert done["status"] == "succeeded", done
    assert done["input"]["mask"] == hashlib.sha256(mask).hexdigest()
    frames = _frames(done["output"]["url"])
    assert frames.shape == (8, 64, 64, 3)

    near = F.max_pool2d(
        torch.from_numpy(inside).float()[None, None], 2 * GAP + 1, stride=1, padding=GAP
    )[0, 0].numpy()
    far = near == 0
    assert far.sum() > 300  # enough background left to judge
    still = _decoded(encode_mp4(np.repeat(image[None], 8, axis=0), 8))
    floor = min(_psnr(frame[far], image[far]) for frame in still) - CODEC_SLACK_DB
    for frame in frames:
        assert _psnr(frame[far], image[far]) >= floor
    animated = mask_region(mask, 64, 64, 8).alpha >= 1.0
    assert classify_inside(frames, animated) is sample.motion


def test_a_mask_that_animates_nothing_is_refused_naming_the_field(
    api: httpx.Client, png_data_uri: str
) -> None:
    black = _png(np.zeros((64, 64), dtype=np.uint8))
    response = api.post(
        "/v1/jobs", json={"image": png_data_uri, "mask": _data_uri(black), "prompt": "zoom in"}
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "mask" and "animates no pixel" in error["message"]
    response = api.post(
        "/v1/jobs", json={"image": png_data_uri, "mask": "data:image/png;base64,@@", "prompt": "x"}
    )
    assert response.status_code == 422 and response.json()["error"]["field"] == "mask"
