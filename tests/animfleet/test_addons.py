"""What a job may ask for in add-ons."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from animfleet.addons import AddonUse, check_addons
from animfleet.jobs import JobParams
from animfleet_api.bounds import MAX_ADDONS


def test_names_scales_counts_and_repeats_are_checked() -> None:
    assert AddonUse(name="shake").scale == 1.0
    for bad in (
        {"name": "Shake"},
        {"name": "a/b"},
        {"name": "x", "scale": 2.5},
        {"name": "x", "scale": -1},
    ):
        with pytest.raises(ValidationError):
            AddonUse(**bad)
    with pytest.raises(ValueError, match="at most"):
        check_addons([AddonUse(name=f"a{i}") for i in range(MAX_ADDONS + 1)])
    with pytest.raises(ValueError, match="repeat"):
        check_addons([AddonUse(name="a"), AddonUse(name="a", scale=0.5)])


def test_records_from_before_addons_still_load() -> None:
    old = '{"prompt": "pan", "frames": 8, "fps": 8, "width": 64, "height": 64, "seed": 1}'
    assert JobParams.model_validate_json(old).addons == ()


def test_an_addon_without_a_control_image_serialises_as_before() -> None:
    assert AddonUse(name="shake").model_dump() == {"name": "shake", "scale": 1.0}
    digest = "ab" * 32
    imaged = AddonUse(name="path", image_sha256=digest)
    assert imaged.model_dump()["image_sha256"] == digest
    assert AddonUse.model_validate_json(imaged.model_dump_json()) == imaged
    with pytest.raises(ValidationError):
        AddonUse(name="path", image_sha256="not a digest")
