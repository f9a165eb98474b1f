from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from PIL import Image

from dispatcher.inputs import MAX_IMAGE_BYTES, InvalidInput, check_image, parse_request


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_accepts_supported_formats(make_image: Callable[..., bytes], fmt: str) -> None:
    assert check_image(make_image(40, 30, fmt=fmt)) == (fmt, 40, 30)


def test_rejects_non_images() -> None:
    with pytest.raises(InvalidInput, match="image: is not a PNG, JPEG or WebP"):
        check_image(b"%PDF-1.7 definitely not an image")


def test_rejects_other_formats() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="GIF")
    with pytest.raises(InvalidInput, match="not a PNG, JPEG or WebP image"):
        check_image(buffer.getvalue())


def test_rejects_truncated_png(make_image: Callable[..., bytes]) -> None:
    data = make_image(64, 64)
    with pytest.raises(InvalidInput, match="image: could not be decoded"):
        check_image(data[: len(data) // 2])


def test_rejects_decompression_bomb_from_its_header(
    png_header_claiming: Callable[[int, int], bytes],
) -> None:
    with pytest.raises(InvalidInput, match="image: is larger than the limit of 16777216 pixels"):
        check_image(png_header_claiming(30000, 30000))
    with pytest.raises(InvalidInput, match="image: is 5000x5000 pixels"):
        check_image(png_header_claiming(5000, 5000))


def test_rejects_oversize_and_empty() -> None:
    with pytest.raises(InvalidInput, match=f"limit is {MAX_IMAGE_BYTES}"):
        check_image(b"\x89PNG" + b"\0" * MAX_IMAGE_BYTES)
    with pytest.raises(InvalidInput, match="empty"):
        check_image(b"")


@pytest.mark.parametrize(
    ("fields", "field", "shown"),
    [
        ({"prompt": "x" * 501}, "prompt", "(got a string of 501 characters)"),  # no fragment
        ({"prompt": "   "}, "prompt", "'   '"),
        ({"prompt": "ok", "frames": 500}, "frames", "500"),
        ({"prompt": "ok", "frames": 1}, "frames", "1"),
        ({"prompt": "ok", "width": 100}, "width", "100"),
        ({"prompt": "ok", "fps": 0}, "fps", "0"),
        ({"prompt": "ok", "colour": "red"}, "colour", "'red'"),
    ],
)
def test_errors_name_field_and_value(fields: dict[str, object], field: str, shown: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_request(**fields)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ") and shown in str(caught.value)


def test_defaults() -> None:
    request = parse_request(prompt="pan left")
    assert (request.frames, request.fps, request.width, request.height) == (8, 8, 512, 512)
