"""Frame 0 is the input image exactly at every size: at the model's own size too (the
pipeline's decode), where a dark, sparse picture used to lose its first frame."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from animfleet.jobs import JobParams
from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from workers.batching import BatchEngine
from workers.model import Animator
from workers.model.animator import load_animator
from workers.model.runtime.loading import prepare_image
from workers.settings import WorkerSettings


@pytest.fixture(scope="module")
def student() -> Animator:
    return load_animator(WorkerSettings(model_dir=SHIPPED_STUDENT_DIR, profile=False))


def _star_field(side: int) -> bytes:
    rng = np.random.default_rng(7)
    stars = np.full((side, side, 3), 3, dtype=np.uint8)
    for y, x in rng.integers(0, side - 1, (12, 2)):
        stars[y, x] = 220
    buffer = io.BytesIO()
    Image.fromarray(stars).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("side", [32, 64])
def test_a_star_field_keeps_its_first_frame(student: Animator, side: int) -> None:
    image = _star_field(side)
    params = JobParams(prompt="zoom in", frames=4, fps=8, width=side, height=side, seed=1)
    fitted = prepare_image(image, side, side)
    frames = student.animate(image, params)
    assert np.array_equal(frames[0], fitted)
    assert not np.array_equal(frames[-1], fitted)  # and it still moves
    engine = BatchEngine(2)
    try:
        batched = engine.animate(student, image, params)
    finally:
        engine.close()
    assert np.array_equal(batched, frames)  # the batch engine pins frame 0 the same way
