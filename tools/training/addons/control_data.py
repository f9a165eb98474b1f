"""Procedural clips for the motion-path add-on: a scene, a path drawn over it, and the clip
of the content moving along the path.

The path (a stroke fading in from faint grey at its start to white at its end, a white dot
there, on black, drawn at the control size) goes from a start point to an end point in the
frame's normalised coordinates (x right, y down, the frame spanning -1..1); over the clip
the content moves by ``end - start`` at constant speed, so the last frame has it moved by
the path. Some clips have a blank control image and do
not move. The truth is known for every clip: the displacement and the per-pixel flow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tools.training.data.motions import TEMPLATES, Motion, Transform
from tools.training.data.scenes import (
    _scene_params,
    _stable_seed,
    pixel_grid,
    render,
    transformed_points,
)
from workers.model.addons.control_branch import CONTROL_SIZE

PATH_TRAIN_SEED = 21
PATH_HELDOUT_SEED = 22
LENGTH = (0.3, 0.9)  # the path's length: how far the content moves over the clip
BLANK_SHARE = 0.1  # clips with an empty control image: no motion
PROMPTS = TEMPLATES[Motion.STATIC]


@dataclass(frozen=True)
class PathSample:
    """``video`` (F, 3, H, W) in [-1, 1]; ``control`` (1, S, S) in [0, 1]; ``displacement``
    (2,) the content's motion over the clip; ``flow`` (F, 2, H, W) source minus pixel."""

    video: torch.Tensor
    control: torch.Tensor
    displacement: torch.Tensor
    prompt: str
    flow: torch.Tensor


def _along(points: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where along the segment a -> b each point lies: 0 at a, 1 at b (clamped)."""
    along = b - a
    return ((points - a) @ along / along.dot(along)).clamp(0, 1)


def draw_path(
    start: torch.Tensor,
    end: torch.Tensor,
    thickness: float,
    head: float,
    faint: float,
    size: int = CONTROL_SIZE,
) -> torch.Tensor:
    """A motion path from ``start`` to ``end`` (normalised units) on black: (1, size, size).

    A stroke that fades in along the way, from ``faint`` at its start to white at its end,
    where a dot (``head`` wide) marks it too: how motion-path tools draw a
    trail, so the direction is in the drawing itself.
    """
    points = pixel_grid(size)
    pixel = 2.0 / size
    t = _along(points, start, end)
    closest = start + t[..., None] * (end - start)
    stroke = torch.sigmoid((thickness / 2 - (points - closest).norm(dim=-1)) / (0.5 * pixel))
    tip = torch.sigmoid((head / 2 - (points - end).norm(dim=-1)) / (0.5 * pixel))
    shade = faint + (1 - faint) * t
    return torch.maximum(stroke * shade, tip)[None]


def path_sample(
    index: int, *, heldout: bool = False, size: int = 32, num_frames: int = 8
) -> PathSample:
    """Clip ``index`` of the motion-path add-on; held-out clips draw from another seed."""
    seed = PATH_HELDOUT_SEED if heldout else PATH_TRAIN_SEED
    generator = torch.Generator().manual_seed(_stable_seed(seed, index))

    def uniform(low: float, high: float) -> float:
        return low + (high - low) * float(torch.rand((), generator=generator))

    prompt = PROMPTS[int(torch.randint(0, len(PROMPTS), (1,), generator=generator))]
    params = _scene_params(generator)
    blank = uniform(0, 1) < BLANK_SHARE
    angle, length = uniform(0, 2 * math.pi), uniform(*LENGTH)
    displacement = torch.tensor([math.cos(angle), math.sin(angle)]) * length
    # The whole path inside the frame, with a margin.
    low = (-0.85 - displacement).clamp(min=-0.85)
    high = (0.85 - displacement).clamp(max=0.85)
    start = low + (high - low) * torch.rand(2, generator=generator)
    control = draw_path(
        start,
        start + displacement,
        thickness=uniform(0.05, 0.1),
        head=uniform(0.1, 0.16),
        faint=uniform(0.15, 0.35),
    )
    if blank:
        control, displacement = torch.zeros_like(control), torch.zeros(2)
    dx, dy = displacement.tolist()
    span = max(num_frames - 1, 1)
    moves = [Transform(dx * f / span, dy * f / span, 0.0, 0.0) for f in range(num_frames)]
    points = transformed_points(moves, size)
    video = render(params, points, pixel=2.0 / size).permute(0, 3, 1, 2)
    video = torch.round((video + 1) * 127.5) / 127.5 - 1
    flow = (points - pixel_grid(size)).permute(0, 3, 1, 2)
    return PathSample(video, control, displacement, prompt, flow)
