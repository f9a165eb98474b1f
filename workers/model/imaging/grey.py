"""Greyscale in, greyscale out.

The model was trained on colour and adds chroma to a grey photograph (dark trees turn green).
The input decides: a greyscale file (a single-channel or grey-alpha PNG, a greyscale JPEG) or
an RGB image whose channels agree everywhere within :data:`GREY_SPREAD` levels is grey, and
then every output frame is projected onto its luma, so all three channels are equal. The
worker's runner applies it to whatever the animator returns (plain, masked or batched jobs).
"""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
from PIL import Image

GREY_SPREAD = 2  # levels between the largest and smallest channel of any pixel
GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "F"})
LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R BT.601, as H.264's yuv420p


def is_grey(data: bytes) -> bool:
    """Whether the image file ``data`` is greyscale (see the module docstring)."""
    with Image.open(io.BytesIO(data)) as opened:
        if opened.mode in GREY_MODES:
            return True
        pixels = np.asarray(opened.convert("RGB"))
    spread = pixels.max(axis=-1).astype(np.int16) - pixels.min(axis=-1)
    return int(spread.max()) <= GREY_SPREAD


def to_grey(frames: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Frames (T, H, W, 3) uint8 with each pixel's three channels set to its luma."""
    out = np.empty_like(frames)
    for index, frame in enumerate(frames):  # a frame at a time: bounded float memory
        luma = np.rint(frame.astype(np.float32) @ LUMA).clip(0, 255).astype(np.uint8)
        out[index] = luma[..., None]
    return out
