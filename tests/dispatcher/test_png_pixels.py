"""The PNG pixel check that stands in for Pillow's full decode: it vouches only for what Pillow
would decode, and leaves every other image (and every verdict against one) to Pillow."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, PngImagePlugin

from dispatcher.inputs import InvalidInput, check_image
from dispatcher.png_pixels import _DEPTHS, bare_png_header, pixels_intact

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Adam7's passes: first column, first row, column step, row step.
ADAM7 = [
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
]


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def rgb_png(
    pixels: np.ndarray,
    *,
    filters: bytes | None = None,
    interlace: bool = False,
    split: int = 1,
    drop_rows: int = 0,
    after: bytes = b"",
) -> bytes:
    """An 8-bit RGB PNG of ``pixels`` built by hand: every row with filter 0 (or ``filters``),
    its stream in ``split`` IDAT chunks, ``drop_rows`` rows short, ``after`` before IEND."""
    height, width = pixels.shape[:2]
    if interlace:
        rows = [
            bytes([0]) + line.tobytes()
            for x0, y0, dx, dy in ADAM7
            if x0 < width and y0 < height
            for line in pixels[y0::dy, x0::dx]
        ]
    else:
        kinds = filters or bytes(height)
        rows = [bytes([kinds[y]]) + pixels[y].tobytes() for y in range(height)]
    stream = zlib.compress(b"".join(rows[: len(rows) - drop_rows]))
    step = -(-len(stream) // split)
    idats = b"".join(chunk(b"IDAT", stream[at : at + step]) for at in range(0, len(stream), step))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 1 if interlace else 0)
    return SIGNATURE + chunk(b"IHDR", header) + idats + after + chunk(b"IEND", b"")


def pillow_decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except (OSError, SyntaxError, ValueError):
        return False
    return True


def vouched(data: bytes) -> bool:
    with Image.open(io.BytesIO(data)) as image:
        assert isinstance(image, PngImagePlugin.PngImageFile)
        return pixels_intact(data, image)


def pillow_png(mode: str, size: tuple[int, int], **save: object) -> bytes:
    values = np.random.default_rng(7).integers(0, 255, (size[1], size[0], 4), dtype=np.uint8)
    image = Image.fromarray(values, "RGBA").convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **save)
    return buffer.getvalue()


PIXELS = np.random.default_rng(3).integers(0, 255, (21, 13, 3), dtype=np.uint8)


@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGB", "RGBA", "I;16"])
@pytest.mark.parametrize("size", [(13, 7), (1, 1), (64, 33)])
def test_vouches_for_plain_pngs_of_every_colour_type(mode: str, size: tuple[int, int]) -> None:
    data = pillow_png(mode, size)
    assert vouched(data)
    assert check_image(data) == ("PNG", *size)


def test_vouches_for_text_before_the_pixels_and_many_idat_chunks() -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("comment", "before the pixels")
    assert vouched(pillow_png("RGB", (40, 30), pnginfo=info))
    assert vouched(rgb_png(PIXELS, split=4))


@pytest.mark.parametrize(
    "data",
    [
        rgb_png(PIXELS, interlace=True),
        rgb_png(PIXELS, after=chunk(b"tEXt", b"comment\0after the pixels")),
        pillow_png("RGB", (20, 10), save_all=True, append_images=[Image.new("RGB", (20, 10))]),
        rgb_png(PIXELS, drop_rows=1),  # a stream that ends early: Pillow leaves the row blank
    ],
    ids=["interlaced", "text after the pixels", "animated", "a row short"],
)
def test_other_layouts_are_left_to_pillow(data: bytes) -> None:
    assert not vouched(data)
    assert pillow_decodes(data)
    assert check_image(data)[0] == "PNG"  # Pillow's full decode accepted it


@pytest.mark.parametrize(
    "data",
    [
        rgb_png(PIXELS, filters=bytes(20) + b"\x05"),
        rgb_png(PIXELS)[:-40] + rgb_png(PIXELS)[-12:],  # the stream cut, IEND kept
    ],
    ids=["unknown filter type", "stream cut"],
)
def test_broken_pixel_streams_are_refused_by_pillow(data: bytes) -> None:
    assert not vouched(data)
    assert not pillow_decodes(data)
    with pytest.raises(InvalidInput, match="image"):
        check_image(data)


@st.composite
def damaged_pngs(draw: st.DrawFn) -> bytes:
    """Plain PNGs with bytes of their pixel stream flipped, cut or spliced."""
    height, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    pixels = np.random.default_rng(draw(st.integers(0, 3))).integers(0, 4, (height, width, 3))
    data = bytearray(rgb_png(pixels.astype(np.uint8), split=draw(st.integers(1, 3))))
    # The IDAT chunks, headers included; or from the header chunk on.
    start, end = draw(st.sampled_from([8, 33])), len(data) - 12
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(start, end - 1))
        kind = draw(st.sampled_from(["flip", "cut", "splice"]))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        end = len(data) - 12
    return bytes(data)


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(data=damaged_pngs())
def test_what_it_vouches_for_pillow_decodes(data: bytes) -> None:
    try:
        with Image.open(io.BytesIO(data)) as image:
            assert isinstance(image, PngImagePlugin.PngImageFile)
            intact, size = pixels_intact(data, image), image.size
    except (OSError, SyntaxError, ValueError):
        intact, size = False, None  # the header itself broke: Pillow refuses to open it
    if intact or (bare_png_header(data) and pixels_intact(data)):
        assert pillow_decodes(data)
    try:
        checked = check_image(data)
    except InvalidInput:
        assert not pillow_decodes(data)  # a refusal is always Pillow's own
    else:
        assert pillow_decodes(data) and size is not None and checked == ("PNG", *size)


def test_a_bare_png_is_read_without_pillow_as_pillow_reads_it() -> None:
    bare = rgb_png(PIXELS, split=2)
    assert bare_png_header(bare) == (13, 21) and vouched(bare) and pixels_intact(bare)
    assert bare_png_header(pillow_png("RGB", (30, 20))) == (30, 20)  # what Pillow writes
    # A palette before the pixels, a broken header checksum: left to Pillow.
    assert bare_png_header(pillow_png("P", (30, 20))) is None
    broken = bytearray(bare)
    broken[30] ^= 1  # the header's CRC
    assert bare_png_header(bytes(broken)) is None
    with pytest.raises(InvalidInput, match="image: is not a PNG"):  # Pillow's verdict
        check_image(bytes(broken))
    # Every depth PNG defines per colour type is one Pillow reads, and only those.
    assert set(PngImagePlugin._MODES) == _DEPTHS


def test_a_bare_png_beyond_the_limits_is_refused_as_before() -> None:
    wide = SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", 9000, 1, 8, 2, 0, 0, 0))
    wide += chunk(b"IDAT", zlib.compress(bytes(27001))) + chunk(b"IEND", b"")
    assert bare_png_header(wide) == (9000, 1)
    with pytest.raises(InvalidInput, match="is 9000x1 pixels; the limit is"):
        check_image(wide)
