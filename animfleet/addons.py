"""Per-request motion add-ons: what a job may ask for, shared by dispatcher and workers.

A job lists at most ``MAX_ADDONS`` add-ons by name, each with a strength (``scale``, 0 to
``MAX_SCALE``: the bounds of :mod:`animfleet_api.bounds`; 1 is what the add-on was trained at);
a name appears once. An image-conditioned add-on (a ControlNet-style branch) also takes a
control image: the image is stored with the job's inputs under :func:`control_input` and the
record keeps its SHA-256 (``image_sha256``), so the worker knows to fetch it and can check what
it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from animfleet_api.bounds import MAX_ADDONS
from animfleet_api.fields import AddonName, Scale


class AddonUse(BaseModel):
    """One add-on a job runs with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: AddonName = Field(description="an add-on the region serves")
    scale: Scale = Field(default=1.0, description="its strength")
    image_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the SHA-256 of its control image, stored with the job's inputs",
    )

    @model_serializer(mode="wrap")
    def _without_image(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Add-ons without a control image serialise as before image-conditioned ones existed.
        data = handler(self)
        if isinstance(data, dict) and data.get("image_sha256") is None:
            data.pop("image_sha256", None)
        return data


def control_input(name: str) -> str:
    """The name under which add-on ``name``'s control image is stored with the job's inputs."""
    return f"addon:{name}"


def check_addons(addons: Sequence[AddonUse]) -> tuple[AddonUse, ...]:
    """The list as a tuple; raises ValueError for too many or a name given twice."""
    if len(addons) > MAX_ADDONS:
        raise ValueError(f"at most {MAX_ADDONS} add-ons per job, got {len(addons)}")
    names = [addon.name for addon in addons]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"add-ons must not repeat: {', '.join(twice)}")
    return tuple(addons)
