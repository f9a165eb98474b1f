"""The committed model (models/animfleet-small) loads where workers load it and moves as told."""

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from animfleet.jobs import JobParams
from animfleet.shipped_models import SHIPPED_MODEL_DIR
from tools.training.data.motions import Motion
from tools.training.evaluation.motion_estimate import classify
from workers.model import Animator

EXAMPLE = Path(__file__).parents[4] / "tools" / "assets" / "example.png"


@pytest.fixture(scope="module")
def animator() -> Animator:
    assert (SHIPPED_MODEL_DIR / "model_index.json").exists(), "the shipped model is missing"
    return Animator(SHIPPED_MODEL_DIR)  # the default variant: fp32, DPM-Solver++


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("prompt", "motion"),
    [("pan left", Motion.PAN_LEFT), ("zoom in", Motion.ZOOM_IN)],
)
def test_the_example_image_moves_as_prompted(
    animator: Animator, prompt: str, motion: Motion
) -> None:
    params = JobParams(prompt=prompt, frames=8, fps=8, width=32, height=32, seed=0, steps=8)
    frames = animator.animate(_png(Image.open(EXAMPLE)), params)
    assert frames.shape == (8, 32, 32, 3)
    assert classify(torch.from_numpy(np.ascontiguousarray(frames))) is motion
