"""Block caching: the deep blocks run every Nth step, the first step of every video runs all."""

from pathlib import Path

import numpy as np
import pytest
import torch

from animfleet.jobs import JobParams
from tests.workers.model.tiny import tiny_student
from workers.model import Animator
from workers.model.runtime.block_cache import BlockCache, install_block_cache
from workers.model.runtime.loading import Variant
from workers.model.runtime.profile import psnr

PARAMS = JobParams(prompt="pan left slowly", frames=4, fps=8, width=16, height=16, seed=3, steps=4)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_student(tmp_path_factory.mktemp("models") / "student")


def test_deep_blocks_run_every_other_step_and_each_video_starts_full(
    student: Path, make_image: object
) -> None:
    plain = Animator(student, Variant(name="plain", steps=4))
    cached = Animator(student, Variant(name="cached", steps=4, block_cache=2))
    cache = cached.block_cache
    assert isinstance(cache, BlockCache)
    image = make_image(16, 16)  # type: ignore[operator]
    frames = cached.animate(image, PARAMS)
    assert (cache.full_calls, cache.cached_calls) == (2, 2)
    again = cached.animate(image, PARAMS)
    assert (cache.full_calls, cache.cached_calls) == (4, 4)  # the new video started full
    assert np.array_equal(frames, again)
    expected = plain.animate(image, PARAMS)
    # Random weights change a lot between steps: related frames, not the same ones.
    assert not np.array_equal(frames, expected) and psnr(frames, expected) > 10


def test_a_full_step_equals_the_plain_forward(student: Path) -> None:
    unet = Animator(student, Variant(name="plain")).pipeline.unet
    generator = torch.Generator().manual_seed(0)
    inputs = {
        "sample": torch.randn(1, 4, 6, 16, 16, generator=generator),
        "timestep": torch.tensor(900),
        "encoder_hidden_states": torch.randn(1, 17, 32, generator=generator),
        "guidance_scale": torch.tensor([[1.0, 1.0]]),
    }
    with torch.no_grad():
        expected = unet(**inputs).sample
        cache = install_block_cache(unet, 2)
        assert cache is not None
        assert torch.equal(unet(**inputs).sample, expected)
        cache.remove()
    assert (
        install_block_cache(unet, 0) is None
        and install_block_cache(torch.nn.Linear(1, 1), 2) is None
    )
