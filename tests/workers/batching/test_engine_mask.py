"""Masked jobs in the batch engine: the mask's box is the sample (its own group beside whole
frames), pasted back into the input; the frames equal a masked job run alone, and every
unmasked pixel is the input's."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from PIL import Image

from animfleet.jobs import JobParams
from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from workers.batching import BatchEngine
from workers.model import Animator
from workers.model.animator import load_animator
from workers.model.imaging.mask import mask_region
from workers.model.runtime.loading import prepare_image
from workers.model.runtime.profile import psnr
from workers.settings import WorkerSettings


def _mask() -> bytes:
    inside = np.zeros((32, 32), dtype=np.uint8)
    inside[4:18, 10:26] = 255
    buffer = io.BytesIO()
    Image.fromarray(inside).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def student() -> Animator:
    return load_animator(
        WorkerSettings(model_dir=SHIPPED_STUDENT_DIR, profile=False, compile=False)
    )


@pytest.fixture
def engine() -> Iterator[BatchEngine]:
    running = BatchEngine(4)
    yield running
    running.close()


def test_a_masked_job_in_a_batch_gives_its_frames_alone(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    mask = _mask()
    jobs = [
        (
            make_image(32, 32, seed=n),
            JobParams(prompt=p, frames=4, fps=8, width=32, height=32, seed=n, steps=4),
        )
        for n, p in enumerate(["zoom in", "pan left", "rotate clockwise"])
    ]
    masks = [mask, None, mask]
    results: dict[int, np.ndarray] = {}

    def run(index: int) -> None:
        image, params = jobs[index]
        results[index] = engine.animate(student, image, params, mask=masks[index])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(results) == [0, 1, 2]
    outside = ~mask_region(mask, 32, 32, 8).inside
    for index, (image, params) in enumerate(jobs):
        alone = student.animate(image, params, mask=masks[index])
        # The engine's contract (tests/workers/batching/test_engine.py): >= 50 dB of alone.
        assert psnr(results[index], alone) >= 50.0
        if masks[index] is not None:
            fitted = prepare_image(image, 32, 32)
            assert (results[index][:, outside] == fitted[outside]).all()


def test_a_masked_job_whose_box_is_rendered_matches_the_job_alone(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    """At 256 px the mask's box is above the working size: the engine runs it at the working
    size and renders the box, as a masked job alone does."""
    mask = _mask()
    image = make_image(256, 256, seed=4)
    params = JobParams(prompt="zoom in", frames=3, fps=8, width=256, height=256, seed=4, steps=4)
    batched = engine.animate(student, image, params, mask=mask)
    assert batched.shape == (3, 256, 256, 3)
    assert np.array_equal(batched, student.animate(image, params, mask=mask))
    outside = ~mask_region(mask, 256, 256, 8).inside
    assert (batched[:, outside] == prepare_image(image, 256, 256)[outside]).all()
