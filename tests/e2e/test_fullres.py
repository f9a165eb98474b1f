"""A 512 px job through the real fleet: the worker runs the model at its working size and
renders the frames at the requested size; the MP4 in storage is 512 px."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
from PIL import Image

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from storage import open_store
from workers.model.runtime.loading import prepare_image

pytestmark = pytest.mark.e2e


def _smooth_png(width: int, height: int) -> bytes:
    """Gradients H.264 keeps (random pixels lose their colour to 4:2:0 chroma)."""
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (width + height)], -1)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_512_px_job_produces_a_512_px_mp4_starting_on_the_input(
    fleet: LocalFleet, client: Client
) -> None:
    image = _smooth_png(640, 480)
    job = client.submit(image, "pan left", home_region="east", frames=3, width=512, height=512)
    record = job.wait(timeout=180)
    assert record.status is JobState.SUCCEEDED, record.error
    assert record.output is not None
    assert (record.output.width, record.output.height) == (512, 512)
    video = open_store(fleet.topology.region("east").storage).get(record.output.key)
    with av.open(io.BytesIO(video)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 3 and frames[0].shape == (512, 512, 3)
    # Frame 0 is the input at full size (up to H.264's loss).
    error = np.mean((frames[0].astype(float) - prepare_image(image, 512, 512).astype(float)) ** 2)
    assert 10 * np.log10(255**2 / error) > 35
