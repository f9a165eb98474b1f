"""Per-request motion add-ons: what a job may ask for, shared by dispatcher and workers.

A job lists at most :data:`MAX_ADDONS` add-ons by name, each with a strength (``scale``,
0 to :data:`MAX_SCALE`; 1 is what the add-on was trained at); a name appears once.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

ADDON_NAME = r"^[a-z][a-z0-9-]{0,31}$"
MAX_ADDONS = 3
MAX_SCALE = 2.0


class AddonUse(BaseModel):
    """One add-on a job runs with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=ADDON_NAME, description="an add-on the region serves")
    scale: float = Field(default=1.0, ge=0.0, le=MAX_SCALE, description="its strength")


def check_addons(addons: Sequence[AddonUse]) -> tuple[AddonUse, ...]:
    """The list as a tuple; raises ValueError for too many or a name given twice."""
    if len(addons) > MAX_ADDONS:
        raise ValueError(f"at most {MAX_ADDONS} add-ons per job, got {len(addons)}")
    names = [addon.name for addon in addons]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"add-ons must not repeat: {', '.join(twice)}")
    return tuple(addons)
