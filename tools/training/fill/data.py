"""Training data for the edge fill: camera moves over larger pictures, so the truth is known.

A sample is a square crop of a larger picture (a scikit-image photograph, or a procedural scene
that extends forever) moved by one of the prompt motions. Where the moved crop's pixels come
from outside the crop, the crop cannot tell what is there, but the picture can: those pixels
are the target, read from the picture's real surroundings.

Only the photographs in :data:`TRAIN_PHOTOS` are trained on. :data:`HELDOUT_PHOTOS` (also
bundled with scikit-image) and the sample photographs of scikit-learn and matplotlib
(:mod:`tools.training.data.photos`) are for evaluation only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tools.training.data.motions import Motion, Transform, transform
from tools.training.data.photos import load_photo
from tools.training.data.scenes import _scene_params, render

# scikit-image's bundled photographs and textures; licences are in the fill model's card.
TRAIN_PHOTOS = (
    "astronaut",
    "camera",
    "chelsea",
    "hubble_deep_field",
    "immunohistochemistry",
    "moon",
    "coins",
    "brick",
    "grass",
    "gravel",
    "retina",
    "stereo_motorcycle",
)
HELDOUT_PHOTOS = ("coffee", "rocket")

# Motions that bring new content into view (zoom in never does), and how often each is drawn.
FILL_MOTIONS = (
    Motion.PAN_LEFT,
    Motion.PAN_RIGHT,
    Motion.PAN_UP,
    Motion.PAN_DOWN,
    Motion.ZOOM_OUT,
    Motion.ROTATE_CW,
    Motion.ROTATE_CCW,
    Motion.BOUNCE,
    Motion.SWAY,
)
# Scales of each photograph's pyramid: a crop of ``size`` pixels covers size / min-side of it.
CROP_FRACTIONS = (0.3, 0.38, 0.46, 0.55)
PROCEDURAL_SHARE = 0.25


@dataclass(frozen=True)
class FillBatch:
    """``frames`` (N, 3, S, S): the moved crop as a warp makes it (the unknown pixels replicate
    the border); ``unknown`` (N, 1, S, S);
    ``truth`` (N, 3, S, S): what the picture has there; ``valid`` (N, 1, S, S): pixels whose
    truth lies inside the picture (a crop near a photograph's edge can move past it)."""

    frames: torch.Tensor
    unknown: torch.Tensor
    truth: torch.Tensor
    valid: torch.Tensor


def crop_source(move: Transform, size: int) -> torch.Tensor:
    """(S, S, 2) where each pixel of the moved crop comes from, in the crop's [-1, 1] units."""
    axis = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 - 1
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")
    x, y = xs - move.shift_x, ys - move.shift_y
    cos, sin, scale = math.cos(move.angle), math.sin(move.angle), math.exp(-move.log_scale)
    return torch.stack([cos * x + sin * y, -sin * x + cos * y], dim=-1) * scale


def outside(source: torch.Tensor) -> torch.Tensor:
    """(..., 1) 1.0 where a source point (..., 2) lies outside the [-1, 1] square."""
    return (source.abs() > 1).any(dim=-1, keepdim=True).float()


class FillData:
    """Draws :class:`FillBatch` es from the training photographs and procedural scenes."""

    def __init__(self, size: int = 64, photos: tuple[str, ...] = TRAIN_PHOTOS) -> None:
        self.size = size
        # Each photograph at a few scales, antialiased once, so a crop of ``size`` pixels is a
        # fraction of it and sampling it needs no further filtering.
        self.pyramids: list[list[torch.Tensor]] = []
        for name in photos:
            photo = load_photo(name)
            short = min(photo.shape[-2:])
            levels = []
            for fraction in CROP_FRACTIONS:
                scale = size / (fraction * short)
                shape = [max(size, round(side * scale)) for side in photo.shape[-2:]]
                levels.append(F.interpolate(photo[None], size=shape, mode="area")[0])
            self.pyramids.append(levels)

    def _move(self, generator: torch.Generator) -> Transform:
        motion = FILL_MOTIONS[int(torch.randint(len(FILL_MOTIONS), (1,), generator=generator))]
        speed = 0.3 + 1.7 * float(torch.rand((), generator=generator))
        frames = 16
        frame = int(torch.randint(1, frames, (1,), generator=generator))
        return transform(motion, speed, frame, frames)

    def _photo_sample(
        self, generator: torch.Generator, source: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        levels = self.pyramids[int(torch.randint(len(self.pyramids), (1,), generator=generator))]
        canvas = levels[int(torch.randint(len(levels), (1,), generator=generator))]
        height, width = canvas.shape[-2:]
        top = int(torch.randint(height - self.size + 1, (1,), generator=generator))
        left = int(torch.randint(width - self.size + 1, (1,), generator=generator))
        crop = canvas[:, top : top + self.size, left : left + self.size]
        # The source point in canvas pixels, then in the canvas's grid_sample units.
        px = left + (source[..., 0] + 1) / 2 * self.size
        py = top + (source[..., 1] + 1) / 2 * self.size
        grid = torch.stack([px / width * 2 - 1, py / height * 2 - 1], dim=-1)
        truth = F.grid_sample(canvas[None], grid[None], align_corners=False)[0]
        moved = F.grid_sample(crop[None], source[None], padding_mode="border", align_corners=False)
        valid = 1 - outside(grid).permute(2, 0, 1)
        return moved[0], truth, valid

    def _scene_sample(
        self, generator: torch.Generator, source: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        params = _scene_params(generator)
        pixel = 2.0 / self.size
        truth = render(params, source, pixel).permute(2, 0, 1)
        crop = render(params, crop_source(Transform(0.0, 0.0, 0.0, 0.0), self.size), pixel)
        crop = crop.permute(2, 0, 1)[None]
        moved = F.grid_sample(crop, source[None], padding_mode="border", align_corners=False)
        return moved[0], truth, torch.ones(1, self.size, self.size)

    def batch(self, generator: torch.Generator, count: int) -> FillBatch:
        """``count`` samples drawn with ``generator``."""
        frames, unknown, truth, valid = [], [], [], []
        for _ in range(count):
            source = crop_source(self._move(generator), self.size)
            if float(torch.rand((), generator=generator)) < PROCEDURAL_SHARE:
                moved, target, ok = self._scene_sample(generator, source)
            else:
                moved, target, ok = self._photo_sample(generator, source)
            mask = outside(source).permute(2, 0, 1)
            frames.append(moved)
            unknown.append(mask)
            truth.append(target)
            valid.append(ok)
        return FillBatch(
            torch.stack(frames), torch.stack(unknown), torch.stack(truth), torch.stack(valid)
        )
