"""The pipeline's guided sampler: passes per step, batching, and the distillation's path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tools.training.base.model import build_scheduler
from tools.training.student.distill import schedule_states
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams


def count_rows(pipe: AnimationPipeline) -> list[int]:
    rows: list[int] = []
    pipe.unet.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(int(args[0].shape[0])), with_kwargs=True
    )
    return rows


def test_the_teacher_makes_three_passes_per_step(shipped_model: Path) -> None:
    pipe = AnimationPipeline.from_pretrained(str(shipped_model.parent / "animfleet-small"))
    rows = count_rows(pipe)
    image = np.full((32, 32, 3), 100, dtype=np.uint8)
    pipe(image, GenerationParams("pan left", 4, 8, num_inference_steps=5))
    assert rows == [3] * 5 and pipe.passes_per_step == 3


def test_a_batch_samples_like_its_members_one_by_one(shipped_model: Path) -> None:
    pipe = AnimationPipeline.from_pretrained(str(shipped_model.parent / "animfleet-small"))
    images = torch.rand(2, 3, 32, 32) * 2 - 1
    prompts = ["zoom in", "rotate clockwise"]
    noise = torch.randn(2, 4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    scales = torch.tensor([[1.0, 1.0], [2.0, 3.0]])
    with torch.inference_mode():
        batch = pipe.denoise(noise, pipe.condition(images, prompts, 4, 8), scales, 4)
        for i in range(2):
            one = pipe.condition(images[i : i + 1], prompts[i : i + 1], 4, 8)
            alone = pipe.denoise(noise[i : i + 1], one, scales[i : i + 1], 4)
            torch.testing.assert_close(alone, batch[i : i + 1], atol=1e-4, rtol=1e-4)


def test_constant_clean_predictions_follow_the_closed_form_line() -> None:
    """What distillation relies on: DPM-Solver++ fed a fixed prediction x0 moves along
    x_t = a_t x0 + s_t e with e fixed, and lands on x0."""
    scheduler = build_scheduler()
    generator = torch.Generator().manual_seed(1)
    x0 = torch.rand(1, 4, 3, 8, 8, generator=generator) * 2 - 1
    z = torch.randn(x0.shape, generator=generator)
    for steps in (8, 4):
        timesteps, a, s = schedule_states(scheduler, steps)
        direction = (z - a[0] * x0) / s[0]
        latents = z
        for index, t in enumerate(timesteps):
            torch.testing.assert_close(latents, a[index] * x0 + s[index] * direction)
            latents = scheduler.step(x0, t, latents).prev_sample
        torch.testing.assert_close(latents, x0)
    # The linear-in-log-SNR schedule's levels are not those of its rounded timesteps.
    abar = scheduler.alphas_cumprod[timesteps]
    assert not torch.allclose(abar.sqrt().float(), a, atol=1e-6)
