"""Mask geometry: the box the model runs on, the feathered blend, and the composite.

The model runs only on the mask's bounding box, grown to the model's size multiple (so compute
shrinks with the mask), and its frames are blended back over the input image with a feathered
alpha that ramps from 0 at the mask's edge to 1 a few pixels inside it. Alpha is exactly 0
outside the mask, so there every frame is the input image bit for bit: the composite is a
separate step on final frames, whatever rendered them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from PIL import Image

from animfleet.masks import THRESHOLD, decode_mask, fitted_mask

# The seam's width as a share of the frame's shorter side (2 pixels at 64, 32 at 1024).
FEATHER_SHARE = 1 / 32


@dataclass(frozen=True)
class Box:
    """A rectangle of the frame: rows ``top .. top + height``, columns ``left .. left + width``."""

    top: int
    left: int
    height: int
    width: int

    @property
    def slices(self) -> tuple[slice, slice]:
        return slice(self.top, self.top + self.height), slice(self.left, self.left + self.width)

    @property
    def area(self) -> int:
        return self.height * self.width


@dataclass(frozen=True)
class MaskRegion:
    """A mask fitted to a frame: where it animates, how strongly (the feathered alpha, float32
    in [0, 1], 0 wherever ``inside`` is false) and the box the model runs on."""

    inside: npt.NDArray[np.bool_]
    alpha: npt.NDArray[np.float32]
    box: Box

    @property
    def coverage(self) -> float:
        """The share of the frame the mask animates."""
        return float(self.inside.mean())


def fit_mask(mask: Image.Image, width: int, height: int) -> npt.NDArray[np.bool_]:
    """(height, width) booleans: the mask fitted like the image, then thresholded."""
    return np.asarray(fitted_mask(mask, width, height), dtype=np.uint8) >= THRESHOLD


def _span(low: int, high: int, full: int, multiple: int, margin: int) -> tuple[int, int]:
    """(start, length) on one axis: ``low .. high`` grown by ``margin`` to a multiple of
    ``multiple``, centred where it can be, kept inside ``0 .. full``."""
    length = math.ceil((high - low + 2 * margin) / multiple) * multiple
    if length >= full:
        return 0, full
    start = (low + high - length) // 2
    return min(max(start, 0), full - length), length


def crop_box(inside: npt.NDArray[np.bool_], multiple: int, margin: int = 0) -> Box:
    """The smallest box around ``inside`` (grown by ``margin``) whose sides divide by
    ``multiple``; raises ValueError for a mask that animates nothing."""
    rows, cols = np.flatnonzero(inside.any(axis=1)), np.flatnonzero(inside.any(axis=0))
    if rows.size == 0:
        raise ValueError("the mask animates no pixel")
    height, width = inside.shape
    top, box_height = _span(int(rows[0]), int(rows[-1]) + 1, height, multiple, margin)
    left, box_width = _span(int(cols[0]), int(cols[-1]) + 1, width, multiple, margin)
    return Box(top, left, box_height, box_width)


def feather(inside: npt.NDArray[np.bool_], radius: int) -> npt.NDArray[np.float32]:
    """Alpha ramping from ``1 / radius`` on the mask's edge pixels to 1 at ``radius`` pixels
    in (chessboard distance), exactly 0 outside. The frame's border is no seam: the mask is
    extended past it, so a mask touching the border stays opaque there."""
    if radius < 1:
        raise ValueError(f"the feather radius must be at least 1 pixel, got {radius}")
    current = torch.from_numpy(inside.astype(np.float32))[None, None]
    total = torch.zeros_like(current)
    for _ in range(radius):
        total += current
        # Erode by one pixel: a pixel stays if its 3x3 neighbourhood is all inside.
        padded = F.pad(1 - current, (1, 1, 1, 1), mode="replicate")
        current = 1 - F.max_pool2d(padded, 3, stride=1)
    alpha: npt.NDArray[np.float32] = (total / radius)[0, 0].numpy()
    return alpha


def feather_radius(width: int, height: int) -> int:
    return max(1, round(min(width, height) * FEATHER_SHARE))


def mask_region(data: bytes, width: int, height: int, multiple: int, margin: int = 0) -> MaskRegion:
    """The region of a mask PNG at ``width`` x ``height`` for a model whose sides divide by
    ``multiple``; raises ValueError when it animates nothing at that size."""
    inside = fit_mask(decode_mask(data), width, height)
    box = crop_box(inside, multiple, margin)
    return MaskRegion(inside, feather(inside, feather_radius(width, height)), box)


def composite(
    frames: npt.NDArray[np.uint8], image: npt.NDArray[np.uint8], alpha: npt.NDArray[np.float32]
) -> npt.NDArray[np.uint8]:
    """``frames`` (T, H, W, 3) blended over ``image`` (H, W, 3) by ``alpha`` (H, W): where alpha
    is 0 every frame is ``image`` exactly, where it is 1 the frames are kept."""
    weight = alpha[None, :, :, None]
    still = image[None].astype(np.float32)
    blended = np.rint(still + weight * (frames.astype(np.float32) - still))
    # alpha == 0 gives the image exactly already; ``where`` makes it so by construction.
    out: npt.NDArray[np.uint8] = np.where(weight > 0, blended, still).astype(np.uint8)
    return out


def paste(
    crop_frames: npt.NDArray[np.uint8], image: npt.NDArray[np.uint8], region: MaskRegion
) -> npt.NDArray[np.uint8]:
    """Full frames: the input image everywhere, the crop's frames composited into the box."""
    rows, cols = region.box.slices
    frames = np.repeat(image[None], crop_frames.shape[0], axis=0)
    frames[:, rows, cols] = composite(crop_frames, image[rows, cols], region.alpha[rows, cols])
    return frames
