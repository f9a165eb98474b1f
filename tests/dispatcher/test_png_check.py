"""The PNG check that stands in for a full decode must never vouch for a file Pillow refuses.

The fuzz tests in ``test_fuzz_inputs`` mutate whole files, so a CRC catches nearly every
mutation; here the CRCs are repaired after mutating the pixel stream, so the inflate and
row checks are what must catch it.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from dispatcher.inputs import InvalidInput, _plain_png_intact, check_image


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, stream: bytes, color_type: int = 2) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", stream)
        + _chunk(b"IEND", b"")
    )


def _rows(width: int, height: int, channels: int, seed: int) -> bytes:
    """Filtered scanlines as an encoder writes them: a filter byte (0-4) and the samples."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (height, 1 + width * channels), dtype=np.uint8)
    pixels[:, 0] = rng.integers(0, 5, height)
    return pixels.tobytes()


def _pillow_decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except (OSError, SyntaxError, ValueError):
        return False
    return True


def test_vouches_for_plain_pngs_pillow_writes() -> None:
    for mode in ("L", "LA", "RGB", "RGBA"):
        buffer = io.BytesIO()
        Image.new(mode, (24, 16)).save(buffer, format="PNG")
        assert _plain_png_intact(buffer.getvalue(), 24, 16), mode


@pytest.mark.parametrize("mode", ["P", "I;16", "1"])  # palette, 16 and 1 bit per sample
def test_other_pngs_go_to_pillow_and_are_accepted(mode: str) -> None:
    buffer = io.BytesIO()
    Image.new(mode, (24, 16)).save(buffer, format="PNG")
    assert not _plain_png_intact(buffer.getvalue(), 24, 16)
    assert check_image(buffer.getvalue())[1:] == (24, 16)


def test_interlaced_pngs_are_not_vouched_for() -> None:
    data = _png(16, 16, zlib.compress(_rows(16, 16, 3, seed=0)))
    header = bytearray(data[16:29])
    header[12] = 1  # Adam7: a different row layout, left to Pillow
    assert not _plain_png_intact(data[:8] + _chunk(b"IHDR", bytes(header)) + data[33:], 16, 16)


def test_a_short_pixel_stream_is_left_to_pillow() -> None:
    rows = _rows(16, 16, 3, seed=1)
    data = _png(16, 16, zlib.compress(rows[: len(rows) // 2]))
    assert not _plain_png_intact(data, 16, 16)
    # Pillow takes a complete zlib stream with rows missing (they stay black), and so did
    # check_image before the fast path: the verdict is still Pillow's.
    assert _pillow_decodes(data) and check_image(data) == ("PNG", 16, 16)
    with pytest.raises(InvalidInput, match="image: could not be decoded"):
        check_image(data[: len(data) // 2])  # a cut stream: refused


def test_refuses_a_bad_filter_byte_with_valid_crcs() -> None:
    rows = bytearray(_rows(16, 16, 3, seed=2))
    rows[49 * 5] = 9  # the filter byte of row 5 (stride 1 + 16 * 3)
    data = _png(16, 16, zlib.compress(bytes(rows)))
    assert not _plain_png_intact(data, 16, 16)
    with pytest.raises(InvalidInput, match="image: could not be decoded"):
        check_image(data)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    size=st.tuples(st.integers(1, 24), st.integers(1, 24)),
    color_type=st.sampled_from([0, 2, 4, 6]),
    seed=st.integers(0, 3),
    mutations=st.lists(
        st.tuples(
            st.sampled_from(["truncate", "flip", "splice", "rows"]),
            st.integers(0, 10**6),
            st.binary(min_size=1, max_size=8),
        ),
        max_size=3,
    ),
)
def test_never_vouches_for_what_pillow_refuses(
    size: tuple[int, int],
    color_type: int,
    seed: int,
    mutations: list[tuple[str, int, bytes]],
) -> None:
    width, height = size
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
    rows = bytearray(_rows(width, height, channels, seed))
    stream = bytearray(zlib.compress(bytes(rows)))
    for kind, at, junk in mutations:
        if kind == "rows":  # a well-formed stream of the wrong rows
            rows[at % len(rows) :] = junk
            stream = bytearray(zlib.compress(bytes(rows)))
            continue
        if not stream:
            break
        at %= len(stream)
        if kind == "truncate":
            del stream[at:]
        elif kind == "flip":
            stream[at] ^= junk[0] or 1
        else:
            stream[at:at] = junk
    data = _png(width, height, bytes(stream), color_type)  # CRCs repaired
    if _plain_png_intact(data, width, height):
        assert _pillow_decodes(data)
    try:
        check_image(data)
    except InvalidInput as error:
        assert error.field == "image"
    else:
        assert _pillow_decodes(data)
