"""Procedural (image, motion prompt, video) triples, deterministic by seed; nothing downloaded.

A scene is a function of continuous coordinates (a sum of coloured sinusoid gratings under a few
anti-aliased shapes), so every frame is rendered exactly at its transformed coordinates: content
moving into view is real scene, not padding, and no resampling blur accumulates over frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tools.training.data.motions import (
    FAMILIES,
    SPEEDS,
    Motion,
    Transform,
    prompt_for,
    transform,
)

TRAIN_SEED = 1
HELDOUT_SEED = 2
GRATINGS = 6
SHAPES = 5
# How often each family is drawn for training: zoom and rotation are harder than pans.
FAMILY_WEIGHTS = {"pan": 0.25, "zoom": 0.25, "rotate": 0.22, "bounce": 0.1, "sway": 0.1}
FAMILY_WEIGHTS["static"] = 1.0 - sum(FAMILY_WEIGHTS.values())
MOTIONS_BY_FAMILY = {family: [m for m in Motion if m.family == family] for family in FAMILIES}


@dataclass(frozen=True)
class Sample:
    """One clip: ``video`` is (F, 3, H, W) in [-1, 1] on uint8 levels; frame 0 is the image."""

    video: torch.Tensor
    prompt: str
    motion: Motion
    speed: float

    @property
    def image(self) -> torch.Tensor:
        return self.video[0]


def _stable_seed(*parts: int) -> int:
    seed = 0
    for part in parts:
        seed = (seed * 1_000_003 + part) % (2**61 - 1)
    return seed


def _scene_params(generator: torch.Generator) -> dict[str, torch.Tensor]:
    def uniform(*shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return low + (high - low) * torch.rand(shape, generator=generator)

    return {
        "base": uniform(3, low=-0.6, high=0.6),
        "grating_color": uniform(GRATINGS, 3, low=-0.5, high=0.5),
        "grating_freq": uniform(GRATINGS, low=2.0, high=11.0),
        "grating_angle": uniform(GRATINGS, high=math.pi),
        "grating_phase": uniform(GRATINGS, high=2 * math.pi),
        "shape_kind": torch.randint(0, 4, (SHAPES,), generator=generator).float(),
        "shape_center": uniform(SHAPES, 2, low=-1.5, high=1.5),
        "shape_size": uniform(SHAPES, low=0.15, high=0.45),
        "shape_angle": uniform(SHAPES, high=2 * math.pi),
        "shape_color": uniform(SHAPES, 3, low=-1.0, high=1.0),
    }


def _shape_distance(p: torch.Tensor, kind: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """Approximate signed distance to a circle (0), triangle (1), square (2) or star (3)."""
    radius = p.norm(dim=-1)
    theta = torch.atan2(p[..., 1], p[..., 0])
    sides = torch.where(kind == 1, 3.0, 4.0)
    sector = 2 * math.pi / sides
    polygon = (
        size * torch.cos(math.pi / sides) / torch.cos(torch.remainder(theta, sector) - sector / 2)
    )
    star = size * (0.65 + 0.35 * torch.cos(5 * theta))
    edge = torch.where(kind == 0, size, torch.where(kind == 3, star, polygon))
    distance: torch.Tensor = radius - edge
    return distance


def render(params: dict[str, torch.Tensor], points: torch.Tensor, pixel: float) -> torch.Tensor:
    """Colours (..., 3) of the scene at scene coordinates ``points`` (..., 2)."""
    x, y = points[..., 0:1], points[..., 1:2]
    angle = params["grating_angle"]
    wave = torch.sin(
        params["grating_freq"] * (torch.cos(angle) * x + torch.sin(angle) * y)
        + params["grating_phase"]
    )  # (..., GRATINGS)
    color = params["base"] + wave @ params["grating_color"] / 2
    for k in range(SHAPES):
        c, s = math.cos(float(params["shape_angle"][k])), math.sin(float(params["shape_angle"][k]))
        local = points - params["shape_center"][k]
        local = torch.stack(
            [c * local[..., 0] + s * local[..., 1], -s * local[..., 0] + c * local[..., 1]], -1
        )
        distance = _shape_distance(local, params["shape_kind"][k], params["shape_size"][k])
        # Anti-aliased coverage over about one pixel, and a dark outline so edges carry texture.
        cover = torch.sigmoid(-distance / (0.5 * pixel))[..., None]
        outline = torch.sigmoid((distance + 2 * pixel) / (0.5 * pixel))[..., None]
        fill = params["shape_color"][k] * (1 - 0.7 * outline)
        color = color * (1 - cover) + fill * cover
    return color.clamp(-1, 1)


def pixel_grid(size: int) -> torch.Tensor:
    """Pixel-centre coordinates (size, size, 2) in [-1, 1], x then y."""
    axis = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 - 1
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")
    return torch.stack([xs, ys], dim=-1)


def source_points(motion: Motion, speed: float, size: int, num_frames: int) -> torch.Tensor:
    """Where in frame 0's coordinates each pixel of each frame comes from: (F, size, size, 2).

    Frame 0 pixel ``p`` appears at ``p' = exp(z) R(a) p + t`` in frame ``f``, so the source of
    output pixel ``p'`` is ``exp(-z) R(-a) (p' - t)``.
    """
    moves = [transform(motion, speed, frame, num_frames) for frame in range(num_frames)]
    return transformed_points(moves, size)


def transformed_points(moves: list[Transform], size: int) -> torch.Tensor:
    """Source points (F, size, size, 2) of per-frame transforms: see :func:`source_points`."""
    shift = torch.tensor([[m.shift_x, m.shift_y] for m in moves]).view(-1, 1, 1, 2)
    cos = torch.tensor([math.cos(m.angle) for m in moves]).view(-1, 1, 1)
    sin = torch.tensor([math.sin(m.angle) for m in moves]).view(-1, 1, 1)
    scale = torch.tensor([math.exp(-m.log_scale) for m in moves]).view(-1, 1, 1, 1)
    shifted = pixel_grid(size) - shift
    x, y = shifted[..., 0], shifted[..., 1]
    points: torch.Tensor = torch.stack([cos * x + sin * y, -sin * x + cos * y], -1) * scale
    return points


def render_clip(
    params: dict[str, torch.Tensor], motion: Motion, speed: float, size: int, num_frames: int
) -> torch.Tensor:
    """The (F, 3, size, size) clip of a scene moving as ``motion`` at ``speed``."""
    points = source_points(motion, speed, size, num_frames)
    video = render(params, points, pixel=2.0 / size).permute(0, 3, 1, 2)
    return torch.round((video + 1) * 127.5) / 127.5 - 1  # on uint8 levels, like real inputs


def flow_field(sample: Sample, size: int) -> torch.Tensor:
    """Ground-truth flow (F, 2, size, size): source point minus pixel, normalised units."""
    frames = sample.video.shape[0]
    points = source_points(sample.motion, sample.speed, size, frames)
    return (points - pixel_grid(size)).permute(0, 3, 1, 2)


def _choose(generator: torch.Generator, count: int) -> int:
    return int(torch.randint(0, count, (1,), generator=generator))


def _sample(generator: torch.Generator, motion: Motion, size: int, num_frames: int) -> Sample:
    speed_name = list(SPEEDS)[_choose(generator, len(SPEEDS))]
    prompt = prompt_for(motion, speed_name, _choose(generator, 4), _choose(generator, 3))
    params = _scene_params(generator)
    speed = SPEEDS[speed_name] if motion is not Motion.STATIC else 0.0
    return Sample(render_clip(params, motion, speed, size, num_frames), prompt, motion, speed)


def training_sample(index: int, size: int = 32, num_frames: int = 8) -> Sample:
    """Training clip number ``index``: family by :data:`FAMILY_WEIGHTS`, then uniform choices."""
    generator = torch.Generator().manual_seed(_stable_seed(TRAIN_SEED, index))
    weights = torch.tensor([FAMILY_WEIGHTS[f] for f in FAMILIES])
    family = FAMILIES[int(torch.multinomial(weights, 1, generator=generator))]
    motions = MOTIONS_BY_FAMILY[family]
    return _sample(generator, motions[_choose(generator, len(motions))], size, num_frames)


def heldout_sample(family: str, index: int, size: int = 32, num_frames: int = 8) -> Sample:
    """Held-out clip ``index`` of ``family``: scenes never drawn for training, motions balanced."""
    if family not in MOTIONS_BY_FAMILY:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    generator = torch.Generator().manual_seed(
        _stable_seed(HELDOUT_SEED, FAMILIES.index(family), index)
    )
    motions = MOTIONS_BY_FAMILY[family]
    return _sample(generator, motions[index % len(motions)], size, num_frames)


def training_batch(
    start: int, batch_size: int, size: int = 32, num_frames: int = 8
) -> tuple[torch.Tensor, list[str], torch.Tensor]:
    """Clips ``start ..`` as (B, F, 3, H, W), their prompts and flows (B, F, 2, H, W)."""
    samples = [training_sample(start + i, size, num_frames) for i in range(batch_size)]
    videos = torch.stack([s.video for s in samples])
    flows = torch.stack([flow_field(s, size) for s in samples])
    return videos, [s.prompt for s in samples], flows
