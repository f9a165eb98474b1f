"""A stored input: the plain image as before, or the image and its mask packed together."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from animfleet.job_input import MAGIC, BrokenInput, pack_input, unpack_input


def test_an_image_without_a_mask_is_stored_as_its_own_bytes(
    make_image: Callable[..., bytes],
) -> None:
    image = make_image()
    assert pack_input(image) == image
    assert unpack_input(image) == (image, None)


def test_an_image_and_its_mask_come_back_as_packed(make_image: Callable[..., bytes]) -> None:
    image, mask = make_image(64, 64, 1), make_image(32, 32, 2)
    stored = pack_input(image, mask)
    assert stored.startswith(MAGIC)
    assert unpack_input(stored) == (image, mask)


@pytest.mark.parametrize(
    "stored", [MAGIC, MAGIC + (5).to_bytes(8, "big") + b"abc", MAGIC + bytes(8)]
)
def test_a_broken_packed_input_is_refused(stored: bytes) -> None:
    with pytest.raises(BrokenInput):
        unpack_input(stored)
