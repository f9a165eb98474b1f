"""Property-based tests of request validation and image checks with malformed files.

The promise at the edge: any request either becomes a valid job or is refused with
:class:`InvalidInput` naming a field, and an image the dispatcher accepts is one the worker can
decode. Hypothesis mutates real encoded images (truncation, flipped bytes, spliced junk).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from dispatcher.inputs import InvalidInput, check_image, parse_request
from workers.model.runtime.loading import prepare_image

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)
FIELDS = [
    "frames",
    "fps",
    "width",
    "height",
    "seed",
    "steps",
    "variant",
    "start_deadline",
    "deadline",
    "metadata",
    "webhook_events_filter",
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    prompt=st.one_of(st.text(max_size=600), JSONISH),
    options=st.dictionaries(
        st.sampled_from(FIELDS), st.one_of(JSONISH, st.integers(-(2**70), 2**70)), max_size=6
    ),
)
def test_any_request_is_a_job_or_names_the_bad_field(prompt: Any, options: dict[str, Any]) -> None:
    try:
        request = parse_request(prompt=prompt, **options)
    except InvalidInput as error:
        assert error.field and error.message
    else:
        assert isinstance(request.prompt, str)


def _encoded(fmt: str, size: tuple[int, int], seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


@st.composite
def malformed_images(draw: st.DrawFn) -> bytes:
    fmt = draw(st.sampled_from(["PNG", "JPEG", "GIF", "WEBP", "BMP"]))
    size = (draw(st.integers(1, 40)), draw(st.integers(1, 40)))
    data = bytearray(_encoded(fmt, size, draw(st.integers(0, 3))))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "splice"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.one_of(malformed_images(), st.binary(max_size=200)))
def test_malformed_images_are_refused_or_decodable(data: bytes) -> None:
    try:
        check_image(data)
    except InvalidInput as error:
        assert error.field == "image"
        return
    frames = prepare_image(data, 32, 32)  # accepted: the worker must be able to decode it
    assert frames.shape == (32, 32, 3)
