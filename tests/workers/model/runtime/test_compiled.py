"""torch.compile at worker start: slow (an inductor compile), so one smallest model and bucket."""

from pathlib import Path

import numpy as np
import pytest

from animfleet.jobs import JobParams
from tests.workers.model.tiny import tiny_unet
from workers.model import Animator
from workers.model.pipelines.build import CONTEXT_DIM, build_pipeline
from workers.model.runtime.loading import ShapeBucket, Variant

BUCKET = ShapeBucket(frames=2, height=16, width=16)
PARAMS = JobParams(prompt="zoom in", frames=2, fps=8, width=16, height=16, seed=1, steps=2)


@pytest.fixture(scope="module")
def one_level_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pipe = build_pipeline()
    pipe.register_modules(unet=tiny_unet(levels=1, context_dim=CONTEXT_DIM))
    path = tmp_path_factory.mktemp("models") / "one-level"
    pipe.save_pretrained(path, safe_serialization=True)
    return path


@pytest.mark.timeout(900)
def test_compiled_matches_eager_without_recompiles(
    one_level_model: Path, make_image: object
) -> None:
    image = make_image(40, 40)  # type: ignore[operator]
    variant = Variant(name="tiny", precision="bf16")  # bf16, de-dup, DPM-Solver++
    eager = Animator(one_level_model, variant)
    compiled = Animator(one_level_model, variant, compile=True, max_buckets=1)
    compiled.warm_up([BUCKET])
    assert compiled.info["compiled"] == ["unet"] and compiled.compiled is not None
    assert compiled.compiled.graphs == 1  # the whole U-Net, no graph breaks

    steps: list[int] = []
    for seed in range(5):
        params = PARAMS.model_copy(update={"seed": seed, "fps": 4 + seed})
        frames = compiled.animate(image, params, lambda i, _: steps.append(i))
        expected = eager.animate(image, params)
        difference = np.abs(frames.astype(int) - expected.astype(int))
        assert difference.max() <= 8 and difference.mean() < 0.5, (seed, difference.max())
    assert compiled.recompiles == 0
    assert steps == [1, 2] * 5  # on_step runs once per step, outside the compiled graph


def test_failed_compile_falls_back_to_eager(one_level_model: Path) -> None:
    animator = Animator(one_level_model, Variant(name="tiny"), compile=True)
    assert animator.compiled is not None

    def broken(*_: object) -> object:
        raise RuntimeError("no C++ compiler")

    animator.compiled._backend = broken  # type: ignore[method-assign]
    for module in animator.compiled.modules.values():
        module.compile(backend=broken, dynamic=False)
    animator.warm_up([BUCKET])
    assert animator.compiled is None and animator.info["compiled"] == []
