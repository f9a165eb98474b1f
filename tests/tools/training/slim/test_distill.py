"""A slimming run on a tiny served student: shared targets, resumable training, export."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.tools.training.conftest import tiny
from tests.workers.model.tiny import tiny_student
from tools.training.slim.distill import SlimConfig, SlimDistiller
from workers.model.pipelines.animation import AnimationPipeline


def _config(source: Path, targets: Path) -> SlimConfig:
    return tiny(source, SlimConfig, teacher_steps=2, share=0.5, targets_dir=str(targets))


def _weights(run: SlimDistiller) -> list[torch.Tensor]:
    return [p.detach().clone() for p in run.ema.unet.parameters()]


def test_a_slim_run_resumes_exactly_and_exports_a_thinner_student(tmp_path: Path) -> None:
    source = tiny_student(tmp_path / "source")
    config = _config(source, tmp_path / "targets")
    straight = SlimDistiller(tmp_path / "straight", config)
    straight.make_targets()
    straight.train()
    interrupted = SlimDistiller(tmp_path / "interrupted", config)
    interrupted.make_targets()  # the shared cache: nothing left to sample
    assert interrupted.state.target_seconds == 0
    interrupted.train(stop_at=2)
    resumed = SlimDistiller(tmp_path / "interrupted")
    assert resumed.state.step == 2
    resumed.train()
    assert all(
        torch.equal(a, b) for a, b in zip(_weights(straight), _weights(resumed), strict=True)
    )
    model = straight.export(tmp_path / "model")
    assert (model / "serving.json").exists()
    assert json.loads((model / "slim.json").read_text())["target_seconds"] > 0  # shared cache
    pipe = AnimationPipeline.from_pretrained(str(model))
    wide = AnimationPipeline.from_pretrained(str(source))
    count = sum(p.numel() for p in pipe.unet.parameters())
    assert pipe.guidance_distilled and count < sum(p.numel() for p in wide.unet.parameters())
    uniform = SlimDistiller(tmp_path / "uniform", replace(config, method="uniform"))
    uniform_count = sum(p.numel() for p in uniform.model.unet.parameters())
    assert uniform_count == pytest.approx(count, rel=0.25)  # 8-channel steps on a tiny net


def test_targets_of_other_settings_are_refused(tmp_path: Path) -> None:
    source = tiny_student(tmp_path / "source")
    SlimDistiller(tmp_path / "a", _config(source, tmp_path / "targets")).make_targets()
    other = replace(_config(source, tmp_path / "targets"), seed=1)
    with pytest.raises(ValueError, match="other settings"):
        SlimDistiller(tmp_path / "b", other).make_targets()
