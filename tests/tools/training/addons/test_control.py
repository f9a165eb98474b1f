"""The motion-path add-on's training: procedural clips whose truth is known, a run that
pretrains then trains through the frozen model, resumes, and exports a branch workers read."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from tools.training.addons.control import ControlConfig, ControlTrainer, angle_error
from tools.training.addons.control_data import path_sample
from workers.model.addons.control_branch import CONTROL_SIZE, read_control
from workers.model.networks.motion_unet import MotionUNet


def test_path_clips_move_the_content_along_the_drawn_path() -> None:
    sample = path_sample(0, size=16)
    again = path_sample(0, size=16)
    assert torch.equal(sample.video, again.video) and torch.equal(sample.control, again.control)
    assert sample.control.shape == (1, CONTROL_SIZE, CONTROL_SIZE)
    dx, dy = sample.displacement.tolist()
    assert 0.3 <= math.hypot(dx, dy) <= 0.9
    # The flow of the last frame: every pixel comes from the displacement behind it.
    assert torch.allclose(sample.flow[-1].mean(dim=(1, 2)), -sample.displacement, atol=1e-5)
    # The stroke brightens towards its end: the brightest pixels lie ahead of the dimmest.
    control = sample.control[0]
    grid = torch.stack(torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="xy"), -1)
    lit = control > 0.05
    bright = grid[lit & (control > 0.9)].mean(0)
    dim = grid[lit & (control < 0.45)].mean(0)
    assert angle_error(tuple((bright - dim).tolist()), (dx, dy)) < 30  # type: ignore[arg-type]
    assert path_sample(0, heldout=True).displacement.tolist() != [dx, dy]


def test_a_run_pretrains_then_trains_resumes_and_exports(tmp_path: Path) -> None:
    student = SHIPPED_STUDENT_DIR  # add-ons are trained on the served student
    config = ControlConfig(
        base=str(student), steps=3, pretrain_steps=1, pretrain_batch=2, batch_size=2, size=16
    )
    run = tmp_path / "run"
    trainer = ControlTrainer(run, config)
    trainer.train(minutes=None)
    assert trainer.state.step == 3
    unet = trainer.model.unet
    assert isinstance(unet, MotionUNet) and not any(p.requires_grad for p in unet.parameters())
    resumed = ControlTrainer(run)
    assert resumed.state.step == 3 and resumed.config == config
    out = trainer.export(tmp_path / "path")
    branch = read_control(out, "path", student.name)
    assert sum(p.numel() for p in branch.parameters()) == sum(
        p.numel() for p in trainer.encoder.parameters()
    )
    assert (out / "training.json").exists()
