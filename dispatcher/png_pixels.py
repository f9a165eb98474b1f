"""The pixel check of a plain PNG without decoding it into an image.

Pillow's ``load`` inflates the pixel stream, undoes each row's filter and unpacks the pixels;
of that, only the inflate and the rows' filter types can fail. For a plain PNG (one frame, not
interlaced, its pixel data followed by ``IEND``) this module checks exactly those: the stream
inflates to every row and each row names a known filter. A bare PNG (the header chunk, then the
pixel data at once: what Pillow itself writes for RGB) needs no Pillow to open either. It
answers only "intact" (inflating a slice at a time, so memory stays small and the interpreter
lock is free while zlib works); anything else (a short or broken stream, other layouts) is left to
Pillow's full decode, which gives the verdict and its message, so an image is never refused
here that Pillow would accept.
"""

from __future__ import annotations

import struct
import zlib

from PIL import PngImagePlugin

# Samples per pixel of each PNG colour type (grey, RGB, palette, grey + alpha, RGBA).
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_FILTER_TYPES = bytes(range(5))  # none, sub, up, average, Paeth
_CHUNK_HEAD = struct.Struct(">I4s")
_FEED = 64 * 1024  # compressed bytes given to zlib at once: what it leaves over is copied
_SLICE = 1 << 20  # inflated bytes at most per step: a 4096x4096 16-bit RGBA PNG is 128 MiB
_IHDR = struct.Struct(">IIBBBBB")
# The signature, then the header chunk's length (13) and type.
_BARE_START = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR"
# The bit depths PNG defines per colour type (and Pillow reads: each has a mode).
_DEPTHS = {
    *((depth, 0) for depth in (1, 2, 4, 8, 16)),
    *((depth, 3) for depth in (1, 2, 4, 8)),
    *((depth, colour) for depth in (8, 16) for colour in (2, 4, 6)),
}


def bare_png_header(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a bare PNG: its signature, a header chunk whose checksum holds, then
    at once its pixel data, and a layout :func:`pixels_intact` can check (one frame, not
    interlaced, a colour type and depth PNG defines). Pillow reads no other chunk before the
    pixels of such a file, so it would open it as this reads it. None: anything else (open it
    with Pillow)."""
    if len(data) < 45 or data[:16] != _BARE_START or data[37:41] != b"IDAT":
        return None
    width, height, depth, colour, compression, filtering, interlace = _IHDR.unpack_from(data, 16)
    if (
        (depth, colour) not in _DEPTHS
        or compression
        or filtering
        or interlace
        or not width
        or not height
        or zlib.crc32(data[12:29]) != int.from_bytes(data[29:33], "big")
    ):
        return None
    return width, height


def pixels_intact(data: bytes, image: PngImagePlugin.PngImageFile | None = None) -> bool:
    """True when the PNG in ``data`` (opened by Pillow as ``image``, its header checked; None:
    a :func:`bare_png_header` one) is a plain PNG whose pixel stream inflates to every row,
    each with a known filter type: what Pillow's ``load`` would decode without error. False:
    not known here (decode it in full)."""
    if image is None:
        size = bare_png_header(data)
        if size is None:
            return False
        (width, height), first = size, 33  # the pixel data's chunk follows the header's
    else:
        width, height = image.size
        if (
            len(image.tile) != 1
            or image.tile[0].codec_name != "zip"
            or image.tile[0].extents != (0, 0, width, height)
            or image.info.get("interlace")
            or getattr(image, "n_frames", 1) != 1
            or "default_image" in image.info
            or data[12:16] != b"IHDR"
            or len(data) < 29
        ):
            return False
        first = image.tile[0].offset - 8  # where Pillow's tile starts: the first IDAT
    depth, colour, compression, filtering, interlace = data[24:29]
    channels = _CHANNELS.get(colour)
    if channels is None or compression or filtering or interlace:
        return False
    row = 1 + (width * channels * depth + 7) // 8  # the filter-type byte, then the samples
    # The IDAT chunks from the first, then IEND: nothing else.
    pieces = []
    at = first
    view = memoryview(data)
    while at + 12 <= len(data):
        length, kind = _CHUNK_HEAD.unpack_from(data, at)
        if kind != b"IDAT":
            break
        if at + 12 + length > len(data):
            return False
        pieces.append(view[at + 8 : at + 8 + length])
        at += 12 + length
    if data[at : at + 8] != b"\0\0\0\0IEND" or not pieces:
        return False
    return _rows_intact(pieces, row, height * row)


def _rows_intact(pieces: list[memoryview], row: int, expected: int) -> bool:
    """Whether the zlib stream in ``pieces`` inflates to ``expected`` bytes, each ``row``-th
    (from the first) a known filter type. Inflated a slice at a time: memory stays at a few
    MiB however large the image, and the interpreter lock is free during each inflate."""
    inflater = zlib.decompressobj()
    done = 0
    feeds = (piece[at : at + _FEED] for piece in pieces for at in range(0, len(piece), _FEED))
    try:
        for feed in feeds:
            pending: bytes | memoryview = feed
            while True:
                limit = min(_SLICE, expected - done)
                rows = inflater.decompress(pending, limit)
                if rows[(-done) % row :: row].translate(None, _FILTER_TYPES):
                    return False
                done += len(rows)
                if done == expected:
                    return True  # like Pillow, ignore what follows the last row
                pending = inflater.unconsumed_tail
                if not pending and len(rows) < limit:  # a full slice may leave output pending
                    break
    except zlib.error:
        return False
    return False
