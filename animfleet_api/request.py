"""The bodies of ``POST /v1/jobs``, ``PUT /v1/jobs/{id}`` and ``POST /v1/jobs/batch``.

The gateway serves these models (so its OpenAPI document describes them) and the SDK exports
them as its request types. They enforce what a schema can publish (types, ranges, lengths), so
a request that breaks them is refused whole, a batch too; what no schema can say (an image that
decodes, a metadata size, an aspect ratio) the dispatcher checks per job with the same fields
(:mod:`animfleet_api.fields`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from animfleet_api import bounds as b
from animfleet_api.fields import (
    AddonName,
    Amplitude,
    Deadline,
    Fps,
    Frames,
    Guidance,
    IdempotencyKey,
    ImageField,
    ModelRef,
    NegativePrompt,
    Priority,
    Prompt,
    Scale,
    Seed,
    Side,
    Speed,
    Steps,
    Tenant,
    Variant,
    WebhookEvents,
    WebhookUrl,
)


def _default(value: int | None) -> dict[str, Any]:
    return {} if value is None else {"default": value}


class AddonRequest(BaseModel):
    """One add-on of a request: its name, strength and, for an image-conditioned add-on, its
    control image (given like the job's image)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: AddonName = Field(description="an add-on the region serves")
    scale: Scale = Field(default=1.0, description="its strength")
    image: ImageField | None = Field(
        default=None,
        description="the control image of an image-conditioned add-on (e.g. path: an arrow "
        "drawn light on dark): a URL, a base64 data URI or an inputs/ storage key",
    )


class RegionRequest(BaseModel):
    """One motion-brush region: where (its mask) and how it moves (kind, stroke, speed,
    amplitude); see the README's motion brush section. The dispatcher checks the rest (a
    stroke the kind needs, points inside the frame)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    mask: ImageField = Field(
        description="PNG of the image's size or aspect ratio, white = the region, sent like "
        "the image",
    )
    kind: b.Kind = Field(default="flow", description="flow, drift, sway, ripple or pulse")
    stroke: list[Annotated[list[float], Field(min_length=2, max_length=2)]] | None = Field(
        default=None,
        min_length=2,
        max_length=b.MAX_STROKE_POINTS,
        description="[[x, y], ...], fractions (0-1) of width and height: the direction, and "
        "by its length how far the content travels over the clip",
        examples=[[[0.2, 0.7], [0.8, 0.7]]],
    )
    speed: Speed | None = Field(default=None, description="pixels per frame (overrides the stroke)")
    amplitude: Amplitude | None = Field(
        default=None, description="pixels, for sway, ripple and pulse"
    )


class JobRequest(BaseModel):
    """``POST /v1/jobs`` and ``PUT /v1/jobs/{id}``."""

    # A field left out (None) takes the default the document shows.

    model_config = ConfigDict(extra="forbid", strict=True)

    image: ImageField = Field(
        description="an http(s) URL, a base64 data URI (data:image/png;base64,...) or the key "
        "of an object under inputs/ in the region's storage",
    )
    mask: ImageField | None = Field(
        default=None,
        description="optional PNG, sent like the image, of its size or aspect ratio: white "
        "animates, elsewhere every frame is the image exactly",
    )
    prompt: Prompt
    frames: Frames | None = Field(
        default=None, json_schema_extra=_default(b.DEFAULT_FRAMES), examples=[b.DEFAULT_FRAMES]
    )
    fps: Fps | None = Field(
        default=None, json_schema_extra=_default(b.DEFAULT_FPS), examples=[b.DEFAULT_FPS]
    )
    size: Side | None = Field(
        default=None,
        description="width and height of a square video (default: see width)",
        examples=[512],
    )
    width: Side | None = Field(
        default=None,
        description=f"omitted with height: {b.DEFAULT_LONG_SIDE} px on the image's long side, "
        "its aspect ratio (multiples of 8); omitted alone: follows height and the image's "
        "aspect ratio",
    )
    height: Side | None = Field(default=None, description="as width")
    seed: Seed | None = Field(default=None, json_schema_extra=_default(None))
    steps: Steps | None = Field(
        default=None,
        description="denoising steps (default: the model's)",
        json_schema_extra=_default(None),
    )
    variant: Variant | None = None
    model: ModelRef | None = Field(
        default=None,
        description='a deployment ("default" when omitted) or a pinned version "name@version"',
    )
    addons: list[AddonRequest] | None = Field(
        default=None,
        max_length=b.MAX_ADDONS,
        description="motion add-ons by name with a strength (0-2), each at most once; an "
        "image-conditioned one with its control image",
        examples=[[{"name": "shake", "scale": 1.0}]],
    )
    regions: list[RegionRequest] | None = Field(
        default=None,
        max_length=b.MAX_REGIONS,
        description="motion-brush regions: inside each the content moves as its kind and "
        "stroke say; outside every region the picture keeps still (or follows the prompt's "
        "camera motion)",
    )
    loop: bool | None = Field(
        default=None,
        description="a seamless loop: the last frame leads into the first",
        json_schema_extra={"default": False},
    )
    negative_prompt: NegativePrompt | None = Field(
        default=None,
        description="what the video should not show; only models that read text (422 else)",
    )
    guidance: Guidance | None = Field(
        default=None,
        description="the model's guidance scale (default: the model's; what it scales depends "
        "on the model's family)",
        json_schema_extra=_default(None),
    )
    webhook: WebhookUrl | None = Field(default=None, description="URL that receives signed events")
    webhook_events_filter: WebhookEvents | None = None
    start_deadline: Deadline | None = Field(
        default=None, description="seconds from submission; not started by then: expired"
    )
    deadline: Deadline | None = Field(
        default=None, description="seconds from submission; still running then: canceled"
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"echoed back as given; at most {b.MAX_METADATA_BYTES // 1024} KiB",
        examples=[{"order": 1234}],
    )
    tenant: Tenant | None = Field(
        default=None,
        description=f"whose fair share the job counts against (default: {b.DEFAULT_TENANT})",
    )
    priority: Priority | None = Field(
        default=None,
        description=f"0-{b.MAX_PRIORITY}, higher starts first within its tenant "
        f"(default {b.DEFAULT_PRIORITY})",
    )


class BatchItem(JobRequest):
    """One job of ``POST /v1/jobs/batch``, with its own idempotency key."""

    idempotency_key: IdempotencyKey | None = None


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    jobs: list[BatchItem] = Field(min_length=1, max_length=b.MAX_BATCH_JOBS)
