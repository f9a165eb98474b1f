"""A compiled model whose frames differ from the eager model's is never served: the warm-up
compares them (PSNR) and falls back to eager. The compile backends here are plain Python
(no inductor), so the test takes seconds."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from animfleet.jobs import JobParams
from tests.workers.model.tiny import tiny_student
from workers.model import Animator
from workers.model.runtime.loading import ShapeBucket, Variant

BUCKET = ShapeBucket(frames=4, height=16, width=16)
PARAMS = JobParams(prompt="pan left slowly", frames=4, fps=8, width=16, height=16, seed=3, steps=4)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_student(tmp_path_factory.mktemp("models") / "student")


def _backend(perturb: bool) -> Any:
    """A compile backend running the traced graph as is, or with its outputs shifted."""

    def backend(graph: torch.fx.GraphModule, _: list[Any]) -> Any:
        def run(*args: Any) -> Any:
            out = graph(*args)
            if not perturb:
                return out
            return [
                o + 0.3 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out
            ]

        return run

    return backend


@pytest.mark.parametrize("perturb", [False, True])
def test_warm_up_serves_a_compiled_model_only_if_it_matches_eager(
    student: Path, make_image: Any, perturb: bool
) -> None:
    variant = Variant(name="tiny", steps=4)
    animator = Animator(student, variant, compile=True, max_buckets=1)
    assert animator.compiled is not None
    animator.compiled._inductor = _backend(perturb)  # the graphs reach this backend
    animator.warm_up([BUCKET])
    quality = animator.info["verified_psnr_db"]["4x16x16"]
    eager = Animator(student, variant)
    image = make_image(16, 16)
    frames, expected = animator.animate(image, PARAMS), eager.animate(image, PARAMS)
    if perturb:
        assert quality < 40 and animator.compiled is None and animator.info["compiled"] == []
        assert np.array_equal(frames, expected)  # what is served is the eager model's output
    else:
        assert quality == float("inf") and animator.info["compiled"] == ["unet"]
        assert np.array_equal(frames, expected)


def test_non_finite_latents_fail_the_job_instead_of_black_frames(student: Path) -> None:
    """NaN latents would become black frames in the uint8 cast (the 5.6 dB of issue 16)."""
    pipe = Animator(student, Variant(name="tiny", steps=4)).pipeline
    latents = torch.zeros(1, 4, 3, 16, 16)
    assert pipe.decode(latents).shape == (4, 16, 16, 3)
    latents[0, 1, 0, 3, 3] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        pipe.decode(latents)
