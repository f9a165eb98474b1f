"""Sizes up to 1024 px: every size accepted before still is; above 512 px, four aspect ratios."""

from __future__ import annotations

import pytest

from dispatcher.inputs import InvalidInput, parse_request


@pytest.mark.parametrize(
    ("width", "height"),
    [
        (64, 64),
        (96, 64),
        (512, 384),
        (512, 512),
        (1024, 1024),
        (800, 1000),
        (576, 1024),
        (1024, 576),
    ],
)
def test_accepts_old_sizes_and_the_supported_ratios_up_to_1024(width: int, height: int) -> None:
    request = parse_request(prompt="pan left", width=width, height=height)
    assert (request.width, request.height) == (width, height)


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (640, 512), (1000, 800)])
def test_refuses_other_ratios_above_512_naming_field_and_value(width: int, height: int) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_request(prompt="pan left", width=width, height=height)
    assert caught.value.field == "width"
    assert f"{width}x{height}" in str(caught.value) and "9:16" in str(caught.value)


@pytest.mark.parametrize(("field", "value"), [("width", 1032), ("height", 2048), ("width", 1020)])
def test_refuses_sides_past_1024_or_off_the_multiple(field: str, value: int) -> None:
    with pytest.raises(InvalidInput, match=f"^{field}: .*got {value}"):
        parse_request(prompt="pan left", **{field: value})


@pytest.mark.parametrize("frames", [8, 16, 24])
def test_accepts_8_to_24_frames(frames: int) -> None:
    assert parse_request(prompt="zoom out", frames=frames, width=512, height=512).frames == frames
