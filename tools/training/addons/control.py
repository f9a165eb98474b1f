"""``animfleet`` motion-path add-on: train, export and evaluate the ControlNet-style branch.

The student stays frozen; only the branch
(:class:`workers.model.addons.control_branch.ControlEncoder`)
learns, through the same hooks workers serve it with, on procedural clips of content moving
along a drawn path (:mod:`tools.training.addons.control_data`): the clean-clip MSE plus flow
supervision, at the noise levels of the student's own 8-step schedule and uniform ones. The
run resumes from its checkpoint; the export is ``addon.safetensors`` (metadata ``kind:
control``) with its card.

Evaluation runs what workers run (the real pipeline, the branch's residuals computed once
per job) on held-out scenes and paths: the clip's measured displacement against the path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from tools.training.addons.control_data import path_sample
from tools.training.addons.lora import every_level, noised, save_addon, warm_cosine, write_summary
from tools.training.data.motions import Motion
from tools.training.evaluation.evaluate import load_pipeline
from tools.training.evaluation.frame_metrics import to_uint8
from tools.training.evaluation.motion_estimate import estimate
from tools.training.loop import RunState, TrainingRun, run_config
from tools.training.student.distill import FPS, schedule_states
from workers.model.addons.control_branch import (
    ControlHooks,
    Ready,
    Residuals,
    encoder_for,
    read_control,
)
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams

BASE = "models/animfleet-small-distilled"
# A clip follows its path when its measured displacement points within this of the path.
ANGLE_TOLERANCE_DEG = 22.5


@dataclass
class ControlConfig:
    """Hyper-parameters of the branch's run; saved in the run directory, fixed for its life."""

    name: str = "path"
    base: str = BASE
    seed: int = 0
    steps: int = 1800
    batch_size: int = 8
    width: int = 16
    learning_rate: float = 3e-3
    ema_decay: float = 0.0  # unused: the branch is exported as trained
    flow_weight: float = 30.0
    size: int = 32
    num_frames: int = 8
    # Steps that first teach the encoder to read a path (its displacement regressed from the
    # control image alone, batch ``pretrain_batch``): through the frozen student alone it
    # barely found the cue in a thousand steps. The regression stays on after, at ``aux_weight``.
    pretrain_steps: int = 600
    pretrain_batch: int = 64
    aux_weight: float = 1.0


class ControlTrainer(TrainingRun[ControlConfig, RunState, AnimationPipeline]):
    """The branch's resumable run in ``run_dir``: the frozen student with the branch hooked,
    exported as trained (no EMA copy)."""

    def __init__(self, run_dir: Path, config: ControlConfig | None = None) -> None:
        cfg = run_config(run_dir, config, ControlConfig)
        self.desc = f"addon {cfg.name}"
        torch.manual_seed(cfg.seed)
        pipe = load_pipeline(Path(cfg.base))
        pipe.unet.requires_grad_(False)
        pipe.text_encoder.requires_grad_(False)
        self.encoder = encoder_for(pipe.unet, cfg.width)
        self.hooks = ControlHooks(pipe.unet)
        self.aux = torch.nn.Linear(self.encoder.zero_motion.in_features, 2)  # not exported
        self.pools = (schedule_states(pipe.scheduler, 8), every_level(pipe.scheduler))
        super().__init__(run_dir, cfg, pipe, None, RunState(), weight_decay=0.0)

    def _trained(self, model: AnimationPipeline) -> list[torch.nn.Module]:
        return [self.encoder, self.aux]  # beside the model, which stays frozen

    def _checkpoint(self) -> dict[str, Any]:
        return {"encoder": self.encoder.state_dict(), "aux": self.aux.state_dict()}

    def _restore(self, payload: dict[str, Any]) -> None:
        self.encoder.load_state_dict(payload["encoder"])
        self.aux.load_state_dict(payload["aux"])

    def _learning_rate(self, step: int) -> float:
        # Warm-up and cosine decay over each stage (pretraining, then the joint training).
        pre = self.config.pretrain_steps
        start, span = (0, pre) if step < pre else (pre, self.config.steps - pre)
        return self.config.learning_rate * warm_cosine(step - start, span)

    def _loss_plot(self) -> dict[str, str]:
        return {
            "ylabel": "path MSE, then x0 + 30 flow + path MSE",
            "title": f"add-on {self.config.name}: pretraining to step "
            f"{self.config.pretrain_steps}, then through the student",
        }

    def aux_loss(self, controls: torch.Tensor, displacements: torch.Tensor) -> torch.Tensor:
        """How far the encoder's pooled features are from telling each path's displacement."""
        _, pooled = self.encoder.encode(controls)
        return F.mse_loss(self.aux(pooled), displacements)

    def pretrain_loss(self, step: int) -> torch.Tensor:
        """A pretraining step's loss: control images alone (their clips are not rendered)."""
        cfg = self.config
        samples = [
            path_sample(step * cfg.pretrain_batch + i, size=8, num_frames=2)
            for i in range(cfg.pretrain_batch)
        ]
        controls = torch.stack([s.control for s in samples])
        return self.aux_loss(controls, torch.stack([s.displacement for s in samples]))

    def loss(self, step: int) -> torch.Tensor:
        """The loss of training step ``step`` (its clips, noise and levels fixed by the step)."""
        cfg = self.config
        if step < cfg.pretrain_steps:
            return self.pretrain_loss(step)
        samples = [
            path_sample(step * cfg.batch_size + i, size=cfg.size) for i in range(cfg.batch_size)
        ]
        video = torch.stack([s.video for s in samples])
        flows = torch.stack([s.flow for s in samples])
        controls = torch.stack([s.control for s in samples])
        noisy, timesteps = noised(video, self.pools, cfg.seed, step)
        with torch.no_grad():
            conditions = self.model.condition(
                video[:, 0], [sample.prompt for sample in samples], cfg.num_frames, FPS
            )
        mid, motion = self.encoder(controls)
        with self.hooks.activate([(Ready(Residuals(mid, motion)), 1.0)]):
            output = self.model.unet(
                torch.cat([noisy, conditions.latents], dim=2),
                timesteps,
                encoder_hidden_states=conditions.context,
                guidance_scale=torch.ones(cfg.batch_size, 2),
            )
        displacements = torch.stack([s.displacement for s in samples])
        loss: torch.Tensor = (
            F.mse_loss(output.sample, video)
            + cfg.flow_weight * F.mse_loss(output.flow, flows)
            + cfg.aux_weight * self.aux_loss(controls, displacements)
        )
        return loss

    def train(self, minutes: float | None = None) -> None:
        """Train to ``config.steps`` (or ``minutes`` of this stretch), checkpointing."""
        self.encoder.train()
        self._run(self.loss, self.config.steps, self.config.steps, minutes, checkpoint_every=50)

    def _write_weights(self, directory: Path) -> None:
        """``addon.safetensors``: the branch's weights, ``kind: control``."""
        metadata = {
            "format": "animfleet-addon",
            "kind": "control",
            "base": Path(self.config.base).name,
            "control": "motion path: a stroke fading in from start to end, light on dark",
            "width": str(self.config.width),
        }
        save_addon(directory, self.encoder.state_dict(), metadata)

    def _describe(self, directory: Path) -> None:
        parameters = sum(v.numel() for v in self.encoder.state_dict().values())
        write_summary(directory, self.state, parameters, self.config)


def angle_error(measured: tuple[float, float], truth: tuple[float, float]) -> float:
    """Degrees between two displacements (180 when the measured one is zero)."""
    norm = math.hypot(*measured) * math.hypot(*truth)
    if norm == 0:
        return 180.0
    cos = (measured[0] * truth[0] + measured[1] * truth[1]) / norm
    return math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def evaluate_control(
    addon_dir: Path, base: Path, clips: int = 48, steps: int = 8, size: int = 64
) -> dict[str, Any]:
    """Held-out accuracy of the shipped branch as workers serve it: per clip (a held-out scene
    and path), whether the video's measured displacement points along the path (within
    :data:`ANGLE_TOLERANCE_DEG`), its length against the path's; the same for the base model
    alone; and whether base motions stay bit-identical with the branch installed but unused."""
    pipe: AnimationPipeline = load_pipeline(base)
    encoder = read_control(addon_dir, addon_dir.name, base.name)
    run: dict[str, Any] = {
        "fps": FPS,
        "num_inference_steps": steps,
        "image_guidance_scale": 1.0,
        "text_guidance_scale": 1.0,
    }
    followed = base_followed = 0
    errors, ratios, blank_moves = [], [], []
    identical = True
    evaluated = 0
    for index in tqdm(range(clips), desc=f"eval {addon_dir.name}", unit="clip"):
        sample = path_sample(index, heldout=True, size=size)
        image = np.ascontiguousarray(to_uint8(sample.video)[0])
        frames = sample.video.shape[0]
        dx, dy = sample.displacement.tolist()
        truth = (float(dx), float(dy))
        params = GenerationParams(sample.prompt, num_frames=frames, seed=index, **run)
        hooks = ControlHooks(pipe.unet)
        try:
            with torch.no_grad():
                mid, motion = encoder(sample.control[None])
            with hooks.activate([(Ready(Residuals(mid, motion)), 1.0)]):
                served = pipe(image, params)
        finally:
            hooks.remove()
        plain = pipe(image, params)
        measured = _displacement(served)
        if truth == (0.0, 0.0):  # a blank control: the clip should stay still
            blank_moves.append(math.hypot(*measured))
            continue
        evaluated += 1
        error = angle_error(measured, truth)
        errors.append(error)
        ratios.append(math.hypot(*measured) / math.hypot(*truth))
        followed += error <= ANGLE_TOLERANCE_DEG
        base_followed += angle_error(_displacement(plain), truth) <= ANGLE_TOLERANCE_DEG
    for index, motion_name in enumerate((Motion.PAN_LEFT, Motion.ZOOM_IN, Motion.ROTATE_CW)):
        identical &= _unused_is_identical(pipe, encoder, motion_name.value, index, run)
    return {
        "addon": addon_dir.name,
        "clips": evaluated,
        "blank_clips": len(blank_moves),
        "steps": steps,
        "size": size,
        "angle_tolerance_deg": ANGLE_TOLERANCE_DEG,
        "motion_accuracy": round(followed / max(evaluated, 1), 4),
        "base_model_accuracy": round(base_followed / max(evaluated, 1), 4),
        "median_angle_error_deg": round(float(np.median(errors)), 2) if errors else None,
        "median_length_ratio": round(float(np.median(ratios)), 3) if ratios else None,
        "blank_control_max_motion": round(max(blank_moves), 4) if blank_moves else None,
        "base_bit_identical_without_addon": identical,
    }


def _displacement(frames: np.ndarray[Any, Any]) -> tuple[float, float]:
    trajectory = estimate(torch.from_numpy(frames))
    return float(trajectory.shift_x[-1]), float(trajectory.shift_y[-1])


def _unused_is_identical(
    pipe: AnimationPipeline, encoder: torch.nn.Module, prompt: str, seed: int, run: dict[str, Any]
) -> bool:
    """A base-motion job's frames with the branch's hooks installed but not active, and after
    a job that used it, against the base model's."""
    sample = path_sample(1000 + seed, heldout=True, size=64)
    image = np.ascontiguousarray(to_uint8(sample.video)[0])
    params = GenerationParams(prompt, num_frames=8, seed=seed, **run)
    plain = pipe(image, params)
    hooks = ControlHooks(pipe.unet)
    try:
        unused = pipe(image, params)
        with torch.no_grad():
            mid, motion = encoder(sample.control[None])
        with hooks.activate([(Ready(Residuals(mid, motion)), 1.0)]):
            pipe(image, params)
        after = pipe(image, params)
    finally:
        hooks.remove()
    return bool(np.array_equal(plain, unused) and np.array_equal(plain, after))
