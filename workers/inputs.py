"""A job's stored inputs as a worker reads them: its image and any extra images, checked
against what its record says they are."""

from __future__ import annotations

import hashlib

from animfleet.addons import control_input
from animfleet.errors import PermanentError
from animfleet.job_inputs import JobInputs, MalformedInputs
from animfleet.jobs import JobParams
from workers.errors import WorkerError


class StoredInputError(WorkerError, PermanentError, ValueError):
    """The stored inputs do not unpack, or lack an image the record names."""


def stored_inputs(stored: bytes, params: JobParams) -> JobInputs:
    """The job's stored inputs, each add-on's control image checked against the SHA-256 its
    record holds; raises :class:`StoredInputError` when one is missing or differs."""
    try:
        inputs = JobInputs.unpack(stored)
    except MalformedInputs as error:
        raise StoredInputError(str(error)) from None
    for use in params.addons:
        if use.image_sha256 is None:
            continue
        control = inputs.extras.get(control_input(use.name))
        if control is None or hashlib.sha256(control).hexdigest() != use.image_sha256:
            raise StoredInputError(
                f"add-on {use.name!r}: its stored control image is missing or not the one submitted"
            )
    return inputs
