"""A mask as the worker sees it: decoded, fitted to the frame like the image, binarised.

White (at least half grey) animates; everything else must stay the input image exactly. The
mask is centre-cropped and resized exactly as the worker fits the image (same aspect-ratio crop,
same output size), so a mask drawn on the submitted image lines up with the frames. Shared by
the dispatcher, which refuses a mask that covers nothing at the job's size, and the worker.
"""

from __future__ import annotations

import io

from PIL import Image, ImageOps

THRESHOLD = 128  # grey levels at or above this animate


def decode_mask(data: bytes) -> Image.Image:
    """The mask as an 8-bit grey image (any PNG mode; alpha ignored, EXIF orientation honoured)."""
    with Image.open(io.BytesIO(data), formats=("PNG",)) as opened:
        return ImageOps.exif_transpose(opened).convert("L")


def fitted_mask(mask: Image.Image, width: int, height: int) -> Image.Image:
    """The mask centre-cropped and resized like the image; pixels >= :data:`THRESHOLD` animate."""
    # Nearest keeps a binary mask binary; a soft (anti-aliased) one is thresholded either way.
    return ImageOps.fit(mask, (width, height), Image.Resampling.NEAREST)


def coverage(mask: Image.Image, width: int, height: int) -> float:
    """The share of a ``width`` x ``height`` frame the fitted mask animates (PIL only: the
    dispatcher, which checks masks, has no numpy)."""
    return sum(fitted_mask(mask, width, height).histogram()[THRESHOLD:]) / (width * height)


def same_aspect(a: tuple[int, int], b: tuple[int, int], tolerance: float = 0.01) -> bool:
    """Whether sizes ``a`` and ``b`` (width, height) share an aspect ratio within ``tolerance``."""
    ratio_a, ratio_b = a[0] / a[1], b[0] / b[1]
    return abs(ratio_a - ratio_b) <= tolerance * ratio_a
