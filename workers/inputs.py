"""A job's stored inputs as a worker reads them: its image and any extra images, checked
against what its record says they are."""

from __future__ import annotations

import hashlib

from animfleet.addons import control_input
from animfleet.brush import region_input
from animfleet.errors import PermanentError
from animfleet.job_inputs import JobInputs, MalformedInputs
from animfleet.jobs import JobParams
from workers.errors import WorkerError


class StoredInputError(WorkerError, PermanentError, ValueError):
    """The stored inputs do not unpack, or an image the record names differs from it."""


class StoredInputMissing(StoredInputError):
    """An image the record names (its mask, a control image) is not stored with the job."""


def stored_inputs(stored: bytes, params: JobParams) -> JobInputs:
    """The job's stored inputs: its image, its mask, each add-on's control image and each
    brushed region's mask checked against the SHA-256 its record holds (the image only on
    records that hold one); raises :class:`StoredInputError` (:class:`StoredInputMissing` for
    one that is not there)."""
    try:
        inputs = JobInputs.unpack(stored)
    except MalformedInputs as error:
        raise StoredInputError(str(error)) from None
    if params.image_sha256 is not None and _sha256(inputs.image) != params.image_sha256:
        raise StoredInputError("image: the stored image is not the one submitted")
    if params.mask is not None:
        if inputs.mask is None:
            raise StoredInputMissing("the job's mask is no longer stored")
        if _sha256(inputs.mask) != params.mask:
            raise StoredInputError("mask: the stored mask is not the one submitted")
    for use in params.addons:
        if use.image_sha256 is None:
            continue
        control = inputs.extras.get(control_input(use.name))
        if control is None or _sha256(control) != use.image_sha256:
            raise StoredInputError(
                f"add-on {use.name!r}: its stored control image is missing or not the one submitted"
            )
    for index, region in enumerate(params.regions):
        stored_mask = inputs.extras.get(region_input(index))
        if stored_mask is None:
            raise StoredInputMissing(f"regions.{index}.mask: the region's mask is no longer stored")
        if _sha256(stored_mask) != region.mask_sha256:
            raise StoredInputError(
                f"regions.{index}.mask: the stored mask is not the one submitted"
            )
    return inputs


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
