"""Motions the base model was never taught, each learnt by one add-on (a LoRA).

They use the conventions of :mod:`tools.training.data.motions` (normalised coordinates, content
motion relative to frame 0) and all return home on the last frame, so none of them is a base
motion seen part way: shake is a fast horizontal jitter (two periods where sway has one),
pulse a zoom in and back out (breathing), orbit a circle of the content around its start,
wobble a rotation back and forth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import torch

from tools.training.data.motions import TEMPLATES, Motion, Transform
from tools.training.data.scenes import (
    _scene_params,
    _stable_seed,
    pixel_grid,
    render,
    transformed_points,
)

SHAKE_AMPLITUDE = 0.08
SHAKE_PERIODS = 2
PULSE_LOG_SCALE = 0.25
ORBIT_RADIUS = 0.12
WOBBLE_ANGLE = math.radians(12.0)

ADDON_TRAIN_SEED = 11
ADDON_HELDOUT_SEED = 12
# Add-on clips are prompted as still scenes: the add-on, not the prompt, asks for the motion.
PROMPTS = TEMPLATES[Motion.STATIC]


class AddonMotion(StrEnum):
    """A motion one add-on teaches; its value is the add-on's name."""

    SHAKE = "shake"
    PULSE = "pulse"
    ORBIT = "orbit"
    WOBBLE = "wobble"


def addon_transform(motion: AddonMotion, frame: int, num_frames: int) -> Transform:
    """Where frame ``frame`` of a ``num_frames`` clip has moved the content of frame 0."""
    turn = 2 * math.pi * frame / max(num_frames - 1, 1)
    if motion is AddonMotion.SHAKE:
        return Transform(SHAKE_AMPLITUDE * math.sin(SHAKE_PERIODS * turn), 0.0, 0.0, 0.0)
    if motion is AddonMotion.PULSE:
        return Transform(0.0, 0.0, PULSE_LOG_SCALE * math.sin(turn / 2), 0.0)
    if motion is AddonMotion.ORBIT:
        # Starts at its own position and goes round once: right, down, left, back.
        return Transform(
            ORBIT_RADIUS * math.sin(turn), ORBIT_RADIUS * (1 - math.cos(turn)), 0.0, 0.0
        )
    return Transform(0.0, 0.0, 0.0, WOBBLE_ANGLE * math.sin(turn))


@dataclass(frozen=True)
class AddonSample:
    """One clip of an add-on motion: ``video`` (F, 3, H, W) in [-1, 1], frame 0 the image."""

    video: torch.Tensor
    prompt: str
    flow: torch.Tensor  # (F, 2, H, W): source point minus pixel, normalised units

    @property
    def image(self) -> torch.Tensor:
        return self.video[0]


def addon_sample(
    motion: AddonMotion, index: int, *, heldout: bool = False, size: int = 32, num_frames: int = 8
) -> AddonSample:
    """Clip ``index`` of ``motion``; held-out clips draw scenes from another seed."""
    seed = ADDON_HELDOUT_SEED if heldout else ADDON_TRAIN_SEED
    which = list(AddonMotion).index(motion)
    generator = torch.Generator().manual_seed(_stable_seed(seed, which, index))
    prompt = PROMPTS[int(torch.randint(0, len(PROMPTS), (1,), generator=generator))]
    params = _scene_params(generator)
    moves = [addon_transform(motion, frame, num_frames) for frame in range(num_frames)]
    points = transformed_points(moves, size)
    video = render(params, points, pixel=2.0 / size).permute(0, 3, 1, 2)
    video = torch.round((video + 1) * 127.5) / 127.5 - 1
    flow = (points - pixel_grid(size)).permute(0, 3, 1, 2)
    return AddonSample(video, prompt, flow)
