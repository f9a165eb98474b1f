"""The worker's read of a job's stored inputs: control images are checked against the digest
the record holds."""

from __future__ import annotations

import hashlib

import pytest

from animfleet.addons import AddonUse, control_input
from animfleet.job_inputs import MAGIC, JobInputs
from animfleet.jobs import JobParams
from workers.inputs import StoredInputError, stored_inputs


def _params(*addons: AddonUse) -> JobParams:
    return JobParams(prompt="still", frames=8, fps=8, width=64, height=64, seed=0, addons=addons)


def test_the_image_and_its_control_images_come_back_checked() -> None:
    control = b"control png"
    digest = hashlib.sha256(control).hexdigest()
    params = _params(AddonUse(name="shake"), AddonUse(name="path", image_sha256=digest))
    stored = JobInputs(b"image", {control_input("path"): control}).pack()
    inputs = stored_inputs(stored, params)
    assert inputs.image == b"image" and inputs.extras == {control_input("path"): control}
    assert stored_inputs(b"image", _params()).image == b"image"  # a job from before extras


def test_a_missing_or_swapped_control_image_is_refused() -> None:
    params = _params(AddonUse(name="path", image_sha256=hashlib.sha256(b"mine").hexdigest()))
    for stored in (
        b"image",
        JobInputs(b"image", {control_input("path"): b"another"}).pack(),
        MAGIC + b"garbage",
    ):
        with pytest.raises(StoredInputError):
            stored_inputs(stored, params)
