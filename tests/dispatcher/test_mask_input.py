"""The ``mask`` field at the edge: a PNG lined up with the image that animates something at the
job's size; every refusal names the field ``mask`` and the value."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from dispatcher.inputs import InvalidInput
from dispatcher.mask_input import check_mask


def _mask(width: int, height: int, grey: int = 255, fmt: str = "PNG", mode: str = "L") -> bytes:
    pixels = np.zeros((height, width), dtype=np.uint8)
    pixels[height // 4 : height // 2, width // 4 : width // 2] = grey
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "1"])
def test_a_png_of_the_images_size_or_aspect_passes_with_its_hash_and_coverage(mode: str) -> None:
    mask = _mask(128, 96, mode=mode)
    checked = check_mask(mask, (128, 96), 64, 48)
    assert checked.sha256 == hashlib.sha256(mask).hexdigest()
    assert checked.coverage == pytest.approx(1 / 16)
    assert check_mask(_mask(32, 24), (128, 96), 64, 48).coverage == pytest.approx(1 / 16)


def test_a_mask_that_is_not_a_png_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"mask: must be a PNG .*got JPEG") as refused:
        check_mask(_mask(64, 64, fmt="JPEG", mode="RGB"), (64, 64), 64, 64)
    assert refused.value.field == "mask"
    with pytest.raises(InvalidInput, match="mask: is not a PNG, JPEG or WebP image"):
        check_mask(b"GIF89a not a mask", (64, 64), 64, 64)
    with pytest.raises(InvalidInput, match="mask: is empty"):
        check_mask(b"", (64, 64), 64, 64)
    with pytest.raises(InvalidInput, match="mask: could not be decoded"):
        check_mask(_mask(64, 64)[:60], (64, 64), 64, 64)


def test_a_mask_of_another_shape_than_the_image_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"mask: is 64x64 pixels; .* image's size \(128x96\)"):
        check_mask(_mask(64, 64), (128, 96), 64, 48)


def test_a_mask_that_animates_nothing_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"mask: animates no pixel at 64x64 .*grey is 0"):
        check_mask(_mask(64, 64, grey=0), (64, 64), 64, 64)
    with pytest.raises(InvalidInput, match="lightest grey is 100"):
        check_mask(_mask(64, 64, grey=100), (64, 64), 64, 64)
    # One white pixel of a large mask vanishes when it is fitted to a small frame.
    speck = np.zeros((512, 512), dtype=np.uint8)
    speck[3, 3] = 255
    buffer = io.BytesIO()
    Image.fromarray(speck).save(buffer, format="PNG")
    with pytest.raises(InvalidInput, match="mask: animates no pixel at 32x32"):
        check_mask(buffer.getvalue(), (512, 512), 32, 32)
