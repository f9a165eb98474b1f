from pathlib import Path

import numpy as np
import pytest

from animfleet.families import class_name_of
from animfleet.jobs import JobParams
from workers.model import Animator
from workers.model.families.svd import SVDFamily
from workers.model.pipelines.build import init_model


@pytest.fixture(scope="module")
def svd_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("models") / "svd", svd=True)


def test_svd_directory_loads_with_diffusers_class_and_animates(
    svd_model: Path, make_image: object
) -> None:
    assert class_name_of(svd_model) == "StableVideoDiffusionPipeline"
    animator = Animator(svd_model)
    assert isinstance(animator.pipeline, SVDFamily)
    assert animator.variant.passes_per_step == 2  # image-only classifier-free guidance
    steps: list[tuple[int, int]] = []
    params = JobParams(prompt="ignored", frames=3, fps=7, width=32, height=24, seed=1, steps=2)
    frames = animator.animate(make_image(50, 40), params, lambda i, n: steps.append((i, n)))  # type: ignore[operator]
    assert frames.shape == (3, 24, 32, 3) and frames.dtype == np.uint8
    assert steps == [(1, 2), (2, 2)]
    again = animator.animate(make_image(50, 40), params)  # type: ignore[operator]
    assert np.array_equal(frames, again)
