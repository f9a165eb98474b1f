"""The pixel check of a plain PNG without decoding it into an image.

Pillow's ``load`` inflates the pixel stream, undoes each row's filter and unpacks the pixels;
of that, only the inflate and the rows' filter types can fail. For a plain PNG (one frame, not
interlaced, its pixel data followed by ``IEND``) this module checks exactly those: the stream
inflates to every row and each row names a known filter. It answers only "intact"; anything else
(a short or broken stream, other layouts) is left to Pillow's full decode, which gives the verdict
and its message, so an image is never refused here that Pillow would accept.
"""

from __future__ import annotations

import struct
import zlib

from PIL import PngImagePlugin

# Samples per pixel of each PNG colour type (grey, RGB, palette, grey + alpha, RGBA).
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_FILTER_TYPES = bytes(range(5))  # none, sub, up, average, Paeth
_CHUNK_HEAD = struct.Struct(">I4s")


def pixels_intact(data: bytes, image: PngImagePlugin.PngImageFile) -> bool:
    """True when ``image`` (opened by Pillow from ``data``, its header checked) is a plain PNG
    whose pixel stream inflates to every row, each with a known filter type: what Pillow's
    ``load`` would decode without error. False: not known here (decode it in full)."""
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
    depth, colour, compression, filtering, interlace = data[24:29]
    channels = _CHANNELS.get(colour)
    if channels is None or compression or filtering or interlace:
        return False
    row = 1 + (width * channels * depth + 7) // 8  # the filter-type byte, then the samples
    expected = height * row
    # The IDAT chunks from the first (where Pillow's tile starts), then IEND: nothing else.
    pieces = []
    at = image.tile[0].offset - 8
    while at + 12 <= len(data):
        length, kind = _CHUNK_HEAD.unpack_from(data, at)
        if kind != b"IDAT":
            break
        if at + 12 + length > len(data):
            return False
        pieces.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    if data[at : at + 8] != b"\0\0\0\0IEND" or not pieces:
        return False
    try:
        rows = zlib.decompressobj().decompress(b"".join(pieces), expected)
    except zlib.error:
        return False
    return len(rows) == expected and not rows[::row].translate(None, _FILTER_TYPES)
