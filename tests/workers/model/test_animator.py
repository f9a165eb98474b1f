from pathlib import Path

import numpy as np
import pytest
import torch

from animfleet.jobs import JobParams
from animfleet.settings import SettingsError
from workers.model import Animator, ModelError
from workers.model.networks.attention import ContextDedupProcessor
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.runtime.loading import ShapeBucket, Variant
from workers.settings import WorkerSettings

PARAMS = JobParams(prompt="pan left slowly", frames=6, fps=8, width=48, height=32, seed=7, steps=3)


@pytest.fixture(scope="module")
def animator(random_model: Path) -> Animator:
    return Animator(random_model)


def test_saved_pipeline_loads_with_from_pretrained(random_model: Path) -> None:
    assert (random_model / "model_index.json").exists()
    assert (random_model / "unet" / "diffusion_pytorch_model.safetensors").exists()
    pipe = AnimationPipeline.from_pretrained(str(random_model))
    assert pipe.unet.config.in_channels == 8


def test_animates_requested_frames_and_size_deterministically(
    animator: Animator, make_image: object
) -> None:
    image = make_image(80, 60)  # type: ignore[operator]
    steps: list[tuple[int, int]] = []
    frames = animator.animate(image, PARAMS, lambda i, n: steps.append((i, n)))
    assert frames.shape == (6, 32, 48, 3) and frames.dtype == np.uint8
    assert steps == [(1, 3), (2, 3), (3, 3)]
    again = animator.animate(image, PARAMS)
    assert np.array_equal(frames, again)
    other = animator.animate(image, PARAMS.model_copy(update={"seed": 8}))
    assert not np.array_equal(frames, other)


def test_model_failures_become_model_errors(animator: Animator, make_image: object) -> None:
    bad = PARAMS.model_copy(update={"width": 36})  # not a multiple of 8: the pipeline refuses
    with pytest.raises(ModelError, match="multiples of 8"):
        animator.animate(make_image(64, 64), bad)  # type: ignore[operator]


def test_settings_choose_precision_scheduler_and_attention(random_model: Path) -> None:
    settings = WorkerSettings.from_env(
        {
            "ANIMFLEET_MODEL_DIR": str(random_model),
            "ANIMFLEET_WORKER_PRECISION": "fp32",
            "ANIMFLEET_WORKER_SCHEDULER": "ddim",
            "ANIMFLEET_WORKER_CONTEXT_DEDUP": "0",
            "ANIMFLEET_WORKER_SHAPE_BUCKETS": "8x64x64,16x32x48",
            "ANIMFLEET_WORKER_BOOT_TUNE_S": "0",  # no profile: serve what the settings say
        }
    )
    animator = Animator.from_settings(settings)
    pipe = animator.pipeline
    assert pipe.unet.dtype == torch.float32 and type(pipe.scheduler).__name__ == "DDIMScheduler"
    assert not any(isinstance(p, ContextDedupProcessor) for p in pipe.unet.attn_processors.values())
    assert animator.info["compiled"] == [] and animator.warmup_time_s == 0.0


def test_default_variant_runs_fp32_with_dedup(animator: Animator) -> None:
    """Without a serving profile the safe choice: fp32 (the reference numerics), de-dup."""
    pipe = animator.pipeline
    assert animator.variant.steps == 15 and animator.variant.passes_per_step == 3
    assert pipe.unet.dtype == torch.float32 and pipe.vae.dtype == torch.float32
    assert type(pipe.scheduler).__name__ == "DPMSolverMultistepScheduler"
    assert all(isinstance(p, ContextDedupProcessor) for p in pipe.unet.attn_processors.values())


def test_bf16_variant_keeps_the_vae_in_fp32(random_model: Path) -> None:
    pipe = Animator(random_model, Variant(name="bf16", precision="bf16")).pipeline
    assert pipe.unet.dtype == torch.bfloat16 and pipe.text_encoder.dtype == torch.bfloat16
    assert pipe.vae.dtype == torch.float32


def test_shape_buckets_parse() -> None:
    assert ShapeBucket.parse("16x32x48") == ShapeBucket(frames=16, height=32, width=48)
    with pytest.raises(SettingsError, match="shape bucket"):
        WorkerSettings.from_env({"ANIMFLEET_WORKER_SHAPE_BUCKETS": "8x64"})
