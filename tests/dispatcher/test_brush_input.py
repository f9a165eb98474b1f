"""Motion-brush regions at the edge: the request's shape (errors name ``regions.<i>.<field>``),
each region's mask taken off, checked like ``mask`` and replaced by its hash, the masks packed
with the job's inputs, and the worker's check of the stored masks against the record."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from animfleet.brush import RegionUse, region_input, region_speed
from animfleet.job_inputs import JobInputs
from animfleet.jobs import JobParams
from dispatcher.brush_input import check_region_masks, take_region_masks
from dispatcher.inputs import InvalidInput, parse_request
from dispatcher.prepared import CheckedImage, PreparedInputs
from dispatcher.records import fingerprint, new_record
from workers.inputs import StoredInputError, StoredInputMissing, stored_inputs

X = PreparedInputs.of(b"x", CheckedImage.known(b"x", 1, 1))  # only its digest matters here

STROKE = [[0.2, 0.5], [0.8, 0.5]]


def _mask(width: int = 64, height: int = 64, white: bool = True) -> bytes:
    pixels = np.zeros((height, width), dtype=np.uint8)
    pixels[height // 4 : height // 2, width // 4 : width // 2] = 255 if white else 0
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _refused(**fields: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        regions, _ = take_region_masks(fields.pop("regions"))
        parse_request(prompt="still", regions=regions, **fields)
    return caught.value


@pytest.mark.parametrize(
    ("regions", "field", "words"),
    [
        ([{"mask": _mask(), "stroke": STROKE}, {"mask": _mask()}], "regions.1.stroke", "needs a"),
        ([{"mask": _mask(), "stroke": [[0.2, 0.5], [1.5, 0.5]]}], "regions.0.stroke", "0 and 1"),
        ([{"mask": _mask(), "stroke": [[0.2, 0.5]]}], "regions.0.stroke", "at least 2"),
        ([{"mask": _mask(), "stroke": [[0.1, 0.1]] * 65}], "regions.0.stroke", "at most 64"),
        ([{"mask": _mask(), "stroke": [[0.5, 0.5]] * 2}], "regions.0.speed", "no length"),
        ([{"mask": _mask(), "stroke": STROKE, "kind": "spin"}], "regions.0.kind", "flow"),
        ([{"mask": _mask(), "stroke": STROKE, "speed": 0}], "regions.0.speed", "greater"),
        ([{"mask": _mask(), "kind": "sway", "amplitude": 999}], "regions.0.stroke", "stroke"),
        ([{"mask": _mask(), "kind": "ripple", "amplitude": 999}], "regions.0.amplitude", "128"),
        ([{"stroke": STROKE}], "regions.0.mask", "required"),
        ([{"mask": "a path", "stroke": STROKE}], "regions.0.mask", "bytes"),
        (
            [{"mask": _mask(), "stroke": STROKE, "mask_sha256": "0" * 64}],
            "regions.0.mask_sha256",
            "",
        ),
        ([{"mask": _mask(), "kind": "pulse"}] * 9, "regions", "at most 8"),
    ],
)
def test_a_malformed_region_is_refused_naming_its_field(
    regions: list[dict[str, object]], field: str, words: str
) -> None:
    refused = _refused(regions=regions)
    assert refused.field == field, refused
    assert words in refused.message


def test_region_masks_are_checked_like_the_jobs_mask() -> None:
    _, masks = take_region_masks(
        [{"mask": _mask(), "kind": "pulse"}, {"mask": _mask(white=False), "kind": "pulse"}]
    )
    with pytest.raises(InvalidInput, match="animates no pixel") as caught:
        check_region_masks(masks, (64, 64), 64, 64)
    assert caught.value.field == "regions.1.mask"
    _, masks = take_region_masks([{"mask": _mask(32, 64), "kind": "pulse"}])
    with pytest.raises(InvalidInput, match="aspect ratio") as caught:
        check_region_masks(masks, (64, 64), 64, 64)
    assert caught.value.field == "regions.0.mask"


def test_regions_are_hashed_on_the_record_and_packed_with_the_image() -> None:
    water, sky = _mask(), _mask(128, 128)
    regions, masks = take_region_masks(
        [
            {"mask": water, "stroke": STROKE},
            {"mask": sky, "kind": "drift", "stroke": STROKE, "speed": 0.5},
        ]
    )
    request = parse_request(prompt="still", regions=regions, loop=True, width=128, height=128)
    check_region_masks(masks, (64, 64), 128, 128)
    inputs = PreparedInputs.of(b"image", CheckedImage.known(b"image", 64, 64))
    record = new_record("east.x", "east", "east", request, inputs)
    assert record.params.loop is True
    assert [r.mask_sha256 for r in record.params.regions] == [
        hashlib.sha256(water).hexdigest(),
        hashlib.sha256(sky).hexdigest(),
    ]
    assert region_speed(record.params.regions[0], 128, 128, 8) == pytest.approx(0.6 * 128 / 7)
    assert region_speed(record.params.regions[1], 128, 128, 8) == 0.5
    # Through the record's JSON (how the worker reads it) and the stored blob, both checked.
    params = JobParams.model_validate_json(record.params.model_dump_json())
    stored = JobInputs(b"image", masks).pack()
    inputs = stored_inputs(stored, params)
    assert inputs.region_masks == {region_input(0): water, region_input(1): sky}
    assert inputs.controls == {}
    with pytest.raises(StoredInputMissing, match=r"regions\.1\.mask"):
        stored_inputs(JobInputs(b"image", {region_input(0): water}).pack(), params)
    with pytest.raises(StoredInputError, match=r"regions\.0\.mask: the stored mask is not"):
        stored_inputs(JobInputs(b"image", {**masks, region_input(0): sky}).pack(), params)


def test_fingerprints_without_regions_are_unchanged_and_regions_change_them() -> None:
    plain = parse_request(prompt="still")
    assert '"regions"' not in plain.model_dump_json(exclude={"addons", "regions", "loop"})
    before = fingerprint(X, plain, "east")
    regions, _ = take_region_masks([{"mask": _mask(), "stroke": STROKE}])
    brushed = parse_request(prompt="still", regions=regions)
    looped = parse_request(prompt="still", regions=regions, loop=True)
    prints = {before, fingerprint(X, brushed, "east"), fingerprint(X, looped, "east")}
    assert len(prints) == 3
    assert RegionUse(kind="pulse") in parse_request(prompt="s", regions=[{"kind": "pulse"}]).regions
