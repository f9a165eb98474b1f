"""The HTTP bodies of the gateway. Value ranges are checked once, by :mod:`dispatcher.inputs`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from animfleet.jobview import JobView
from dispatcher.inputs import MAX_PROMPT_CHARS


def _bounds(low: int, high: int, default: int | None) -> dict[str, Any]:
    found: dict[str, Any] = {"minimum": low, "maximum": high}
    if default is not None:
        found["default"] = default
    return found


__all__ = [
    "BatchItem",
    "BatchRequest",
    "BatchResponse",
    "BatchResult",
    "ErrorBody",
    "ErrorResponse",
    "JobRequest",
    "JobView",
    "RegionView",
    "Regions",
]


class JobRequest(BaseModel):
    """``POST /v1/jobs`` and ``PUT /v1/jobs/{id}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image: str = Field(
        min_length=1,
        max_length=16 * 2**20,
        pattern=r"^(data:|https?://|inputs/)",
        description="an http(s) URL, a base64 data URI (data:image/png;base64,...) or the key "
        "of an object under inputs/ in the region's storage",
    )
    prompt: str = Field(
        json_schema_extra={"minLength": 1, "maxLength": MAX_PROMPT_CHARS},
        description="the motion to animate",
        examples=["pan left slowly"],
    )
    # Bounds are documented here and checked by dispatcher.inputs, whose messages name the field
    # and the value (one check, one wording); None means the default shown.
    frames: StrictInt | None = Field(
        default=None, json_schema_extra=_bounds(2, 32, 8), examples=[8]
    )
    fps: StrictInt | None = Field(default=None, json_schema_extra=_bounds(1, 60, 8), examples=[8])
    size: StrictInt | None = Field(
        default=None,
        description="width and height of a square video",
        json_schema_extra={**_bounds(32, 512, 64), "multipleOf": 8},
        examples=[64],
    )
    width: StrictInt | None = Field(
        default=None, json_schema_extra={**_bounds(32, 512, 64), "multipleOf": 8}
    )
    height: StrictInt | None = Field(
        default=None, json_schema_extra={**_bounds(32, 512, 64), "multipleOf": 8}
    )
    seed: StrictInt | None = Field(default=None, json_schema_extra=_bounds(0, 2**32 - 1, None))
    steps: StrictInt | None = Field(
        default=None,
        description="denoising steps (default: the model's)",
        json_schema_extra=_bounds(1, 100, None),
    )
    variant: str | None = Field(default=None, json_schema_extra={"maxLength": 64})
    webhook: str | None = Field(default=None, description="URL that receives signed events")
    webhook_events_filter: list[Literal["start", "progress", "completed"]] | None = None
    start_deadline: float | None = Field(
        default=None, description="seconds from submission; not started by then: expired"
    )
    deadline: float | None = Field(
        default=None, description="seconds from submission; still running then: canceled"
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="echoed back as given; at most 4 KiB",
        examples=[{"order": 1234}],
    )
    tenant: str | None = Field(
        default=None, description="whose fair share the job counts against (default: default)"
    )
    priority: StrictInt | None = Field(
        default=None, description="0-9, higher starts first within its tenant (default 5)"
    )

    def options(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`dispatcher.Client.submit` besides image and prompt."""
        fields = self.model_dump(exclude={"image", "prompt", "size", "webhook"}, exclude_none=True)
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
