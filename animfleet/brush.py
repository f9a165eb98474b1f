"""Motion-brush regions of a job: what a caller may ask for, shared by dispatcher and workers.

A job lists at most :data:`~animfleet_api.bounds.MAX_REGIONS` regions; each is a mask (a PNG
like the job's ``mask``: white is the region) and a motion. ``kind`` says how the region moves:

- ``flow``: along the stroke's local tangent (a curved stroke bends the flow);
- ``drift``: a uniform translation along the stroke's overall direction;
- ``sway``: back and forth across the stroke, once over the clip;
- ``ripple``: radial waves from the region's centre (or the stroke's first point);
- ``pulse``: growing and shrinking about the region's centre.

The stroke is a polyline of 2 to :data:`~animfleet_api.bounds.MAX_STROKE_POINTS` points ``[x,
y]``, each a fraction (0 to 1) of the width and height. For ``flow`` and ``drift`` its length is
how far the content travels over the clip (so its speed), unless ``speed`` (pixels per frame at
the output size) says otherwise. ``amplitude`` (pixels at the output size) is how far ``sway``,
``ripple`` and ``pulse`` move. The region's mask is stored with the job's inputs under
:func:`region_input` and the record keeps its SHA-256 (``mask_sha256``), as for an add-on's
control image.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from animfleet.job_inputs import REGION_PREFIX
from animfleet_api.bounds import MAX_REGIONS, MAX_STROKE_POINTS, Kind
from animfleet_api.fields import Amplitude, Speed

# Kinds whose motion goes along a stroke, which they therefore need.
STROKED = frozenset({"flow", "drift", "sway"})
Point = tuple[float, float]  # (x, y): fractions of width and height


class RegionUse(BaseModel):
    """One brushed region of a job, as its record holds it (the mask by its hash)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind = Field(default="flow", description="how the region moves")
    stroke: tuple[Point, ...] | None = Field(
        default=None,
        min_length=2,
        max_length=MAX_STROKE_POINTS,
        validate_default=True,
        description="[[x, y], ...] as fractions (0-1) of width and height: the direction, and "
        "by its length the distance travelled over the clip",
    )
    speed: Speed | None = Field(
        default=None,
        validate_default=True,
        description="pixels per frame at the output size (overrides the stroke's length)",
    )
    amplitude: Amplitude | None = Field(
        default=None,
        description="pixels at the output size, for sway, ripple and pulse",
    )
    mask_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the SHA-256 of the region's mask, stored with the job's inputs",
    )

    # Defaults are validated too: a missing stroke or speed is judged with the kind (the
    # error then names the field, e.g. regions.2.stroke).
    @field_validator("stroke", mode="after")
    @classmethod
    def _stroke_fits(cls, value: tuple[Point, ...] | None, info: ValidationInfo) -> object:
        for point in value or ():
            if not all(0.0 <= v <= 1.0 and math.isfinite(v) for v in point):
                raise ValueError(
                    f"point {list(point)} must have x and y between 0 and 1 "
                    "(fractions of width and height)"
                )
        kind = info.data.get("kind", "flow")
        if kind in STROKED and value is None:
            raise ValueError(f"a {kind} region needs a stroke (its direction)")
        return value

    @field_validator("speed", mode="after")
    @classmethod
    def _moves(cls, value: float | None, info: ValidationInfo) -> float | None:
        stroke = info.data.get("stroke") or ()
        moving = info.data.get("kind") in ("flow", "drift") and value is None and stroke
        if moving and _length(stroke, 1.0, 1.0) == 0:
            raise ValueError("the stroke has no length: draw it longer, or give a speed")
        return value


def _length(points: Sequence[Point], width: float, height: float) -> float:
    return sum(
        math.hypot((b[0] - a[0]) * width, (b[1] - a[1]) * height)
        for a, b in itertools.pairwise(points)
    )


def stroke_length(region: RegionUse, width: float = 1.0, height: float = 1.0) -> float:
    """The stroke's length in pixels of a ``width`` x ``height`` frame (fractions by default)."""
    return _length(region.stroke or (), width, height)


def region_speed(region: RegionUse, width: int, height: int, frames: int) -> float:
    """Pixels per frame a ``flow`` or ``drift`` region moves at ``width`` x ``height``: its
    ``speed``, else its stroke's length spread over the clip's ``frames - 1`` steps."""
    if region.speed is not None:
        return region.speed
    return stroke_length(region, width, height) / max(frames - 1, 1)


def region_input(index: int) -> str:
    """The name under which region ``index``'s mask is stored with the job's inputs."""
    return f"{REGION_PREFIX}{index}"


def check_regions(regions: Sequence[RegionUse]) -> tuple[RegionUse, ...]:
    """The list as a tuple; raises ValueError for too many."""
    if len(regions) > MAX_REGIONS:
        raise ValueError(f"at most {MAX_REGIONS} regions per job, got {len(regions)}")
    return tuple(regions)
