"""Guidance + step distillation on a tiny teacher: targets, resumable training, export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.tools.training.conftest import tiny
from tools.training.evaluation.evaluate import load_pipeline
from tools.training.student.distill import Distiller, make_student
from workers.model.animator import Animator
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.runtime.serving import load_serving


def _weights(distiller: Distiller) -> list[torch.Tensor]:
    return [p.detach().clone() for p in distiller.ema.unet.parameters()]


def test_targets_are_the_teachers_guided_samples_and_repeat(tmp_path: Path, teacher: Path) -> None:
    distiller = Distiller(tmp_path / "a", tiny(teacher))
    distiller.make_targets()
    targets = distiller.load_targets()
    assert targets.samples.shape == (4, 4, 3, 16, 16) and len(targets.prompts) == 4
    low, high = torch.tensor([1.0, 1.0]), torch.tensor([2.0, 3.0])
    assert bool(((targets.scales >= low) & (targets.scales <= high)).all())
    again = Distiller(tmp_path / "b", tiny(teacher))
    again.make_targets()
    assert torch.equal(again.load_targets().samples, targets.samples)
    # Sample 0 again through the teacher pipeline's own sampler: the same guided sample.
    pipe = distiller.teacher
    with torch.inference_mode():
        conditions = pipe.condition(targets.images[:1], targets.prompts[:1], 4, 8)
        sample = pipe.denoise(targets.noise[:1], conditions, targets.scales[:1], 4)
    torch.testing.assert_close(sample, targets.samples[:1])


def test_the_student_starts_as_the_teachers_image_and_text_pass(teacher: Path) -> None:
    teacher_pipe = load_pipeline(teacher)
    student = make_student(teacher_pipe, seed=0)
    sample = torch.randn(2, 4, 6, 16, 16)
    context = torch.randn(2, 17, 32)
    timesteps = torch.tensor([999, 10])
    with torch.no_grad():
        expected = teacher_pipe.unet(sample, timesteps, encoder_hidden_states=context).sample
        for scales in ([1.0, 1.0], [2.0, 3.0]):
            got = student.unet(
                sample,
                timesteps,
                encoder_hidden_states=context,
                guidance_scale=torch.tensor([scales, scales]),
            ).sample
            torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="guidance_scale"):
        student.unet(sample, timesteps, encoder_hidden_states=context)


def test_resumed_distillation_equals_uninterrupted(tmp_path: Path, teacher: Path) -> None:
    straight = Distiller(tmp_path / "straight", tiny(teacher))
    straight.make_targets()
    straight.train()
    interrupted = Distiller(tmp_path / "interrupted", tiny(teacher))
    interrupted.make_targets()
    interrupted.train(stop_at=2)
    resumed = Distiller(tmp_path / "interrupted")
    assert resumed.state.step == 2 and resumed.config.steps == 3
    resumed.train()
    assert all(
        torch.equal(a, b) for a, b in zip(_weights(straight), _weights(resumed), strict=True)
    )
    untrained = Distiller(tmp_path / "fresh", tiny(teacher))
    assert not all(
        torch.equal(a, b) for a, b in zip(_weights(straight), _weights(untrained), strict=True)
    )


def test_a_run_refuses_another_config(tmp_path: Path, teacher: Path) -> None:
    Distiller(tmp_path, tiny(teacher)).save()
    with pytest.raises(ValueError, match="another config"):
        Distiller(tmp_path, tiny(teacher, batch_size=3))


def test_the_exported_student_serves_with_one_pass_per_step(tmp_path: Path, teacher: Path) -> None:
    distiller = Distiller(tmp_path / "run", tiny(teacher))
    distiller.make_targets()
    distiller.train()
    model = distiller.export(tmp_path / "student")
    serving = load_serving(model)
    assert (serving.steps, serving.passes_per_step) == (2, 1)
    assert serving.guidance_range is not None and serving.guidance_range.text == (1.0, 3.0)
    pipe = AnimationPipeline.from_pretrained(str(model))
    assert pipe.guidance_distilled and pipe.passes_per_step == 1
    animator = Animator(model)
    assert animator.variant.passes_per_step == 1
