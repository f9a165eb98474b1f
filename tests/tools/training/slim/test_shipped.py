"""The shipped slimmed student: selectable by name, loads with the real ``from_pretrained`` and
animates."""

from __future__ import annotations

import numpy as np

from animfleet.shipped_models import MODELS_DIR, resolve_model
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams

SLIM_DIR = MODELS_DIR / "animfleet-small-slim"


def test_the_shipped_slim_student_loads_by_name_and_animates() -> None:
    assert resolve_model("animfleet-small-slim") == SLIM_DIR
    pipe = AnimationPipeline.from_pretrained(str(SLIM_DIR))
    assert pipe.guidance_distilled and pipe.unet.config.inner_channels is not None
    assert sum(p.numel() for p in pipe.unet.parameters()) < 1_288_146
    pipe.set_progress_bar_config(disable=True)
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    frames = pipe(image, GenerationParams("pan left", 4, 8, num_inference_steps=2))
    assert frames.shape == (4, 32, 32, 3) and frames.dtype == np.uint8


def test_a_worker_serves_the_slim_student_with_one_pass_per_step() -> None:
    from workers.model.animator import Animator
    from workers.model.runtime.serving import load_serving

    serving = load_serving(SLIM_DIR)
    assert (serving.steps, serving.passes_per_step) == (8, 1)
    assert Animator(SLIM_DIR).variant.passes_per_step == 1
