"""Mask geometry: the model's box, the feathered alpha and the composite that keeps every
unmasked pixel of every frame equal to the input."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from workers.model.imaging.mask import Box, composite, crop_box, feather, mask_region, paste


def _inside(height: int, width: int, rows: slice, cols: slice) -> np.ndarray:
    inside = np.zeros((height, width), dtype=bool)
    inside[rows, cols] = True
    return inside


def test_the_box_is_the_masks_bounds_grown_to_the_multiple_and_centred() -> None:
    inside = _inside(64, 64, slice(20, 30), slice(10, 13))
    box = crop_box(inside, 8)
    assert (box.height, box.width) == (16, 8)
    assert box.top <= 20 and box.top + box.height >= 30
    assert box.left <= 10 and box.left + box.width >= 13
    assert box.top == 17  # centred: (20 + 30 - 16) // 2


def test_the_box_stays_in_the_frame_and_spans_an_axis_it_would_not_fit() -> None:
    corner = crop_box(_inside(64, 48, slice(0, 3), slice(45, 48)), 8)
    assert corner == Box(top=0, left=40, height=8, width=8)
    wide = crop_box(_inside(64, 48, slice(30, 34), slice(2, 46)), 8)
    assert (wide.left, wide.width) == (0, 48)
    assert crop_box(_inside(64, 48, slice(30, 34), slice(20, 30)), 8, margin=4).width == 24


def test_a_mask_that_animates_nothing_has_no_box() -> None:
    with pytest.raises(ValueError, match="no pixel"):
        crop_box(np.zeros((8, 8), dtype=bool), 8)


def test_feather_is_zero_outside_one_deep_inside_and_ramps_at_the_seam() -> None:
    inside = _inside(32, 32, slice(8, 24), slice(8, 24))
    alpha = feather(inside, 3)
    assert alpha.dtype == np.float32
    assert (alpha[~inside] == 0).all()
    assert (alpha[11:21, 11:21] == 1).all()
    assert alpha[8, 16] == pytest.approx(1 / 3) and alpha[9, 16] == pytest.approx(2 / 3)


def test_the_frame_border_is_no_seam() -> None:
    alpha = feather(_inside(16, 16, slice(0, 16), slice(0, 8)), 2)
    assert (alpha[:, :7] == 1).all() and (alpha[:, 7] == 0.5).all()


def test_composite_keeps_every_unmasked_pixel_exactly_and_the_animated_ones_fully() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
    frames = rng.integers(0, 256, (5, 24, 24, 3), dtype=np.uint8)
    inside = _inside(24, 24, slice(4, 20), slice(6, 18))
    alpha = feather(inside, 2)
    out = composite(frames, image, alpha)
    assert out.dtype == np.uint8 and out.shape == frames.shape
    assert (out[:, ~inside] == image[~inside]).all()
    full = alpha == 1
    assert (out[:, full] == frames[:, full]).all()
    seam = (alpha > 0) & (alpha < 1)
    low = np.minimum(frames[:, seam], image[seam])
    high = np.maximum(frames[:, seam], image[seam])
    assert ((out[:, seam] >= low) & (out[:, seam] <= high)).all()


def _png(inside: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(inside.astype(np.uint8) * 255).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_mask_png_is_fitted_like_the_image_and_pasted_back_into_the_input() -> None:
    # A mask at twice the frame's size: resized with the image, it lands where it was drawn.
    big = _inside(128, 192, slice(32, 64), slice(96, 160))
    region = mask_region(_png(big), 96, 64, 8)
    assert region.inside.shape == (64, 96)
    assert region.inside[16:32, 48:80].all() and region.coverage == pytest.approx(512 / 6144)
    assert region.box == Box(top=16, left=48, height=16, width=32)
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
    crop_frames = rng.integers(0, 256, (4, 16, 32, 3), dtype=np.uint8)
    frames = paste(crop_frames, image, region)
    assert frames.shape == (4, 64, 96, 3)
    assert (frames[:, ~region.inside] == image[~region.inside]).all()
    assert (frames[:, 20:28, 52:76] == crop_frames[:, 4:12, 4:28]).all()
