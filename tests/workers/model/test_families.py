"""Family adapters in the worker's model: a tiny checkpoint of each family animates through the
worker's call (steps reported, seeded), a mask composites its frames over the photograph, and a
class no family serves is refused when the worker loads it."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from animfleet.jobs import JobParams
from tools.families.tiny import build_tiny
from workers.model import Animator
from workers.model.animator import ModelError
from workers.model.families.base import FamilyPipeline
from workers.model.families.registry import ADAPTERS, load_family
from workers.model.pipelines.generation import GenerationParams
from workers.model.runtime.loading import prepare_image


@pytest.fixture(scope="module")
def ltx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny("ltx", tmp_path_factory.mktemp("families") / "ltx")


def test_the_profile_hook_sees_the_loaded_pipeline_before_any_job(ltx: Path) -> None:
    seen: list[FamilyPipeline] = []
    loaded = load_family(ltx, profile=seen.append)
    assert seen == [loaded] and type(loaded) is ADAPTERS["ltx"]
    assert loaded.denoiser is loaded.pipe.transformer
    card = np.zeros((32, 32, 3), dtype=np.uint8)
    steps: list[tuple[int, int]] = []
    frames = loaded(card, GenerationParams("pan", 9, 8, 2), lambda i, n: steps.append((i, n)))
    assert frames.shape == (9, 32, 32, 3) and steps == [(1, 2), (2, 2)]


def test_a_canceled_job_stops_between_steps(ltx: Path) -> None:
    loaded = load_family(ltx)
    steps: list[int] = []

    def cancel_after_first(done: int, _: int) -> None:
        steps.append(done)
        raise InterruptedError("canceled")

    card = np.zeros((32, 32, 3), dtype=np.uint8)
    with pytest.raises(InterruptedError):
        loaded(card, GenerationParams("pan", 9, 8, 5), cancel_after_first)
    assert steps == [1]


def test_a_mask_keeps_the_photograph_outside_it_exactly(
    ltx: Path, make_image: Callable[..., bytes]
) -> None:
    animator = Animator(ltx)
    image = make_image(64, 64)
    mask = np.zeros((64, 64), dtype=np.uint8)
    mask[24:40, 24:40] = 255  # its box, at the family's multiple (32), leaves a border
    out = io.BytesIO()
    Image.fromarray(mask).save(out, format="PNG")
    params = JobParams(prompt="pan", frames=9, fps=8, width=64, height=64, seed=1, steps=2)
    frames = animator.animate(image, params, mask=out.getvalue())
    photo = prepare_image(image, 64, 64)
    assert frames.shape == (9, 64, 64, 3)
    assert np.array_equal(frames[:, :4], np.broadcast_to(photo[:4], frames[:, :4].shape))
    assert not np.array_equal(frames[-1, 28:36, 28:36], photo[28:36, 28:36])


def test_a_class_no_family_serves_is_refused_when_the_worker_loads_it(
    ltx: Path, tmp_path: Path
) -> None:
    odd = tmp_path / "odd"
    odd.mkdir()
    index = (ltx / "model_index.json").read_text()
    (odd / "model_index.json").write_text(index.replace("LTXImageToVideoPipeline", "MochiPipeline"))
    with pytest.raises(ModelError, match=r"MochiPipeline.*supported.*WanImageToVideoPipeline"):
        Animator(odd)
