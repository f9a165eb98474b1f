"""Masks drawn from the procedural scenes, and motion measured inside a mask.

A mask is one of the scenes' shapes (circle, triangle, square, star) at a random place and
angle, scaled until it covers the asked share of the frame; deterministic by seed. Motion inside
a masked clip is classified in the mask's own box, from the pixels the seam leaves fully
animated only (the rest stays still by design).
"""

from __future__ import annotations

import io
import math

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image

from tools.training.data.motions import Motion
from tools.training.data.scenes import _shape_distance, _stable_seed, pixel_grid
from tools.training.evaluation.motion_estimate import STATIC_BELOW, estimate, scores

MASK_SEED = 3
KINDS = ("circle", "triangle", "square", "star")
Mask = npt.NDArray[np.bool_]


def _shape(kind: int, centre: torch.Tensor, angle: float, size: float, side: int) -> Mask:
    c, s = math.cos(angle), math.sin(angle)
    local = pixel_grid(side) - centre
    local = torch.stack(
        [c * local[..., 0] + s * local[..., 1], -s * local[..., 0] + c * local[..., 1]], -1
    )
    distance = _shape_distance(local, torch.tensor(float(kind)), torch.tensor(size))
    inside: Mask = (distance <= 0).numpy()
    return inside


def scene_mask(index: int, area: float, side: int, kind: int | None = None) -> Mask:
    """Mask ``index`` (side x side) covering ``area`` of the frame (within a pixel or two);
    ``area`` 1 is the whole frame. ``kind`` picks the shape (default: drawn)."""
    if area >= 1.0:
        return np.ones((side, side), dtype=bool)
    generator = torch.Generator().manual_seed(_stable_seed(MASK_SEED, index))
    drawn = int(torch.randint(0, len(KINDS), (1,), generator=generator))
    shape = drawn if kind is None else kind
    angle = float(torch.rand(1, generator=generator)) * 2 * math.pi
    spot = torch.rand(2, generator=generator) * 2 - 1
    low, high = 0.01, 3.0
    for _ in range(30):  # bisect the size: coverage grows with it
        size = (low + high) / 2
        # Centred far enough in that the shape stays in the frame where it can.
        centre = spot * max(0.0, 1.0 - size)
        inside = _shape(shape, centre, angle, size, side)
        low, high = (size, high) if inside.mean() < area else (low, size)
    return inside


def mask_png(inside: Mask) -> bytes:
    """A mask as the API takes it: a greyscale PNG, white where it animates."""
    buffer = io.BytesIO()
    Image.fromarray(inside.astype(np.uint8) * 255, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def classify_inside(frames: npt.NDArray[np.uint8], animated: Mask) -> Motion:
    """The motion ``frames`` (T, H, W, 3) show inside ``animated`` (the fully animated pixels),
    measured in the box around it, or ``static``."""
    rows, cols = np.flatnonzero(animated.any(axis=1)), np.flatnonzero(animated.any(axis=0))
    box = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
    clip = torch.from_numpy(np.ascontiguousarray(frames[:, box[0], box[1]]))
    ranked = scores(estimate(clip, torch.from_numpy(animated[box])))
    best = max(ranked, key=lambda motion: ranked[motion])
    return best if ranked[best] >= STATIC_BELOW else Motion.STATIC
