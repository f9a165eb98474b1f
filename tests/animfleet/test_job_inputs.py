"""A job's inputs as one stored blob: an image alone is stored as it is; extra images travel
with it and come back byte for byte; a blob that lies about its parts is refused."""

from __future__ import annotations

import pytest

from animfleet.job_inputs import MAGIC, JobInputs, MalformedInputs


def test_an_image_alone_is_stored_as_it_is() -> None:
    image = b"\x89PNG\r\n\x1a\nrest"
    assert JobInputs(image).pack() == image
    assert JobInputs.unpack(image) == JobInputs(image)


def test_extra_images_round_trip() -> None:
    inputs = JobInputs(b"image bytes", {"addon:path": b"\x00control\n", "mask": b""})
    blob = inputs.pack()
    assert blob.startswith(MAGIC)
    back = JobInputs.unpack(blob)
    assert back.image == b"image bytes"
    assert dict(back.extras) == {"addon:path": b"\x00control\n", "mask": b""}
    assert back.mask == b"" and back.controls == {"addon:path": b"\x00control\n"}
    assert JobInputs(b"image").mask is None and JobInputs(b"image").controls == {}


def test_bad_names_and_lying_headers_are_refused() -> None:
    with pytest.raises(ValueError, match="input name"):
        JobInputs(b"x", {"Bad Name": b"y"}).pack()
    blob = JobInputs(b"image", {"addon:path": b"control"}).pack()
    for broken in (blob[:-1], blob + b"!", MAGIC + b"{not json\n", MAGIC + b'{"parts": 3}\n'):
        with pytest.raises(MalformedInputs):
            JobInputs.unpack(broken)
