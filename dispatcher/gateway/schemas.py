"""The HTTP bodies of the gateway. Value ranges are checked once, by :mod:`dispatcher.inputs`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from animfleet.jobview import JobView

__all__ = ["ErrorBody", "ErrorResponse", "JobRequest", "JobView", "RegionView", "Regions"]


class JobRequest(BaseModel):
    """``POST /v1/jobs`` and ``PUT /v1/jobs/{id}``."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(
        max_length=16 * 2**20,
        description="an http(s) URL, a base64 data URI (data:image/png;base64,...) or the key "
        "of an object under inputs/ in the region's storage",
    )
    prompt: str
    frames: int | None = None
    fps: int | None = None
    size: int | None = Field(default=None, description="width and height of a square video")
    width: int | None = None
    height: int | None = None
    seed: int | None = None
    steps: int | None = None
    variant: str | None = None
    webhook: str | None = Field(default=None, description="URL that receives signed events")
    webhook_events_filter: list[Literal["start", "progress", "completed"]] | None = None
    start_deadline: float | None = Field(
        default=None, description="seconds from submission; not started by then: expired"
    )
    deadline: float | None = Field(
        default=None, description="seconds from submission; still running then: canceled"
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="echoed back as given")

    def options(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`dispatcher.Client.submit` besides image and prompt."""
        fields = self.model_dump(exclude={"image", "prompt", "size", "webhook"}, exclude_none=True)
        if self.size is not None:
            fields.setdefault("width", self.size)
            fields.setdefault("height", self.size)
        fields["webhook_url"] = self.webhook
        return fields


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class RegionView(BaseModel):
    name: str
    live_workers: int
    busy_workers: int
    queue_depth: int


class Regions(BaseModel):
    regions: list[RegionView]


class Replayed(BaseModel):
    webhook_id: str
    type: str
