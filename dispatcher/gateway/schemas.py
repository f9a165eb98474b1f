"""The HTTP bodies of the gateway.

The schema enforces what it publishes (types, ranges, lengths), so a request that breaks it is
refused whole, a batch too; what no schema can say (an image that decodes, a metadata size) is
checked by :mod:`dispatcher.inputs`, per batch item.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from animfleet.addons import ADDON_NAME, MAX_ADDONS, MAX_SCALE
from animfleet.brush import (
    MAX_AMPLITUDE,
    MAX_REGIONS,
    MAX_SPEED,
    MAX_STROKE_POINTS,
    Kind,
)
from animfleet.jobs import MAX_PRIORITY
from animfleet.jobview import JobView
from animfleet.versions import MODEL_FIELD
from dispatcher.inputs import MAX_DEADLINE_S, MAX_PROMPT_CHARS, MAX_SIDE


def _json_integer(value: object) -> object:
    """JSON Schema's integer: an integral number (8 or 8.0), never a boolean or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be an integer")
        return int(value)
    return value


# Constraints first, the JSON check around them: the schema keeps minimum and maximum.
_INTEGER = BeforeValidator(_json_integer)
Frames = Annotated[int, Field(ge=2, le=32), _INTEGER]
Fps = Annotated[int, Field(ge=1, le=60), _INTEGER]
Side = Annotated[int, Field(ge=32, le=MAX_SIDE, multiple_of=8), _INTEGER]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1), _INTEGER]
Steps = Annotated[int, Field(ge=1, le=100), _INTEGER]
Priority = Annotated[int, Field(ge=0, le=MAX_PRIORITY), _INTEGER]


def _default(value: int | None) -> dict[str, Any]:
    return {} if value is None else {"default": value}


__all__ = [
    "AddonRequest",
    "BatchItem",
    "BatchRequest",
    "BatchResponse",
    "BatchResult",
    "ErrorBody",
    "ErrorResponse",
    "JobRequest",
    "JobView",
    "RegionRequest",
    "RegionView",
    "Regions",
]


IMAGE_FIELD = r"^(data:|https?://|inputs/)"


class AddonRequest(BaseModel):
    """One add-on of a request: its name, strength and, for an image-conditioned add-on, its
    control image (given like the job's image)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=ADDON_NAME, description="an add-on the region serves")
    scale: float = Field(default=1.0, ge=0.0, le=MAX_SCALE, description="its strength")
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=16 * 2**20,
        pattern=IMAGE_FIELD,
        description="the control image of an image-conditioned add-on (e.g. path: an arrow "
        "drawn light on dark): a URL, a base64 data URI or an inputs/ storage key",
    )


class RegionRequest(BaseModel):
    """One motion-brush region: where (its mask) and how it moves (kind, stroke, speed,
    amplitude); see the README's motion brush section. The dispatcher checks the rest (a
    stroke the kind needs, points inside the frame)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    mask: str = Field(
        min_length=1,
        max_length=16 * 2**20,
        pattern=IMAGE_FIELD,
        description="PNG of the image's size or aspect ratio, white = the region, sent like "
        "the image",
    )
    kind: Kind = Field(default="flow", description="flow, drift, sway, ripple or pulse")
    stroke: list[Annotated[list[float], Field(min_length=2, max_length=2)]] | None = Field(
        default=None,
        min_length=2,
        max_length=MAX_STROKE_POINTS,
        description="[[x, y], ...], fractions (0-1) of width and height: the direction, and "
        "by its length how far the content travels over the clip",
        examples=[[[0.2, 0.7], [0.8, 0.7]]],
    )
    speed: float | None = Field(
        default=None, gt=0, le=MAX_SPEED, description="pixels per frame (overrides the stroke)"
    )
    amplitude: float | None = Field(
        default=None, gt=0, le=MAX_AMPLITUDE, description="pixels, for sway, ripple and pulse"
    )


class JobRequest(BaseModel):
    """``POST /v1/jobs`` and ``PUT /v1/jobs/{id}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image: str = Field(
        min_length=1,
        max_length=16 * 2**20,
        pattern=IMAGE_FIELD,
        description="an http(s) URL, a base64 data URI (data:image/png;base64,...) or the key "
        "of an object under inputs/ in the region's storage",
    )
    mask: str | None = Field(
        default=None,
        min_length=1,
        max_length=16 * 2**20,
        pattern=r"^(data:|https?://|inputs/)",
        description="optional PNG, sent like the image, of its size or aspect ratio: white "
        "animates, elsewhere every frame is the image exactly",
    )
    prompt: str = Field(
        min_length=1,
        max_length=MAX_PROMPT_CHARS,
        # Not blank, no control characters but tab and newline.
        pattern=r"^[^\x00-\x08\x0b-\x1f]*[^\s\x00-\x1f][^\x00-\x08\x0b-\x1f]*$",
        description="the motion to animate",
        examples=["pan left slowly"],
    )
    # The same bounds as dispatcher.inputs.AnimationRequest; None means the default shown.
    frames: Frames | None = Field(default=None, json_schema_extra=_default(8), examples=[8])
    fps: Fps | None = Field(default=None, json_schema_extra=_default(8), examples=[8])
    size: Side | None = Field(
        default=None,
        description="width and height of a square video (default: see width)",
        examples=[512],
    )
    width: Side | None = Field(
        default=None,
        description="omitted with height: 512 px on the image's long side, its aspect ratio "
        "(multiples of 8); omitted alone: follows height and the image's aspect ratio",
    )
    height: Side | None = Field(default=None, description="as width")
    seed: Seed | None = Field(default=None, json_schema_extra=_default(None))
    steps: Steps | None = Field(
        default=None,
        description="denoising steps (default: the model's)",
        json_schema_extra=_default(None),
    )
    variant: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    model: str | None = Field(
        default=None,
        pattern=MODEL_FIELD,
        description='a deployment ("default" when omitted) or a pinned version "name@version"',
    )
    addons: list[AddonRequest] | None = Field(
        default=None,
        max_length=MAX_ADDONS,
        description="motion add-ons by name with a strength (0-2), each at most once; an "
        "image-conditioned one with its control image",
        examples=[[{"name": "shake", "scale": 1.0}]],
    )
    regions: list[RegionRequest] | None = Field(
        default=None,
        max_length=MAX_REGIONS,
        description="motion-brush regions: inside each the content moves as its kind and "
        "stroke say; outside every region the picture keeps still (or follows the prompt's "
        "camera motion)",
    )
    loop: bool | None = Field(
        default=None,
        description="a seamless loop: the last frame leads into the first",
        json_schema_extra={"default": False},
    )
    webhook: str | None = Field(
        default=None, max_length=2048, description="URL that receives signed events"
    )
    webhook_events_filter: list[Literal["start", "progress", "completed"]] | None = Field(
        default=None, min_length=1, max_length=3
    )
    start_deadline: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_S,
        description="seconds from submission; not started by then: expired",
    )
    deadline: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_S,
        description="seconds from submission; still running then: canceled",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="echoed back as given; at most 4 KiB",
        examples=[{"order": 1234}],
    )
    tenant: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="whose fair share the job counts against (default: default)",
    )
    priority: Priority | None = Field(
        default=None,
        description="0-9, higher starts first within its tenant (default 5)",
    )

    def options(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`dispatcher.Client.submit` besides image and prompt."""
        sent_apart = {"image", "mask", "prompt", "size", "webhook"}
        fields = self.model_dump(exclude=sent_apart, exclude_none=True)
        if self.size is not None:
            fields.setdefault("width", self.size)
            fields.setdefault("height", self.size)
        fields["webhook_url"] = self.webhook
        return fields


class BatchItem(JobRequest):
    """One job of ``POST /v1/jobs/batch``, with its own idempotency key."""

    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)

    def options(self) -> dict[str, Any]:
        fields = super().options()
        fields.pop("idempotency_key", None)
        return fields


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    jobs: list[BatchItem] = Field(min_length=1, max_length=500)


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class BatchResult(BaseModel):
    """Per item, in request order: ``status`` as a single submit would answer (202 created,
    200 an idempotent repeat, or the error's code) and the job or the error."""

    status: int
    job: JobView | None = None
    error: ErrorBody | None = None


class BatchResponse(BaseModel):
    results: list[BatchResult]


class RegionView(BaseModel):
    name: str
    live_workers: int
    busy_workers: int
    queue_depth: int
    backlog: int = Field(description="jobs waiting for a GPU in the region's backlog")
    scaling_signal: float = Field(description="(backlog + in flight) / max(live workers, 1)")


class Regions(BaseModel):
    regions: list[RegionView]


class Replayed(BaseModel):
    webhook_id: str
    type: str
