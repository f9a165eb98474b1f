"""The fields of a job request with their bounds and error messages: one type per field, used
by the gateway's body (:mod:`animfleet_api.request`) and the dispatcher's validation alike."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from animfleet_api import bounds as b

_PROMPT = re.compile(b.PROMPT_PATTERN)


def _json_integer(value: object) -> object:
    """JSON Schema's integer: an integral number (8 or 8.0), never a boolean or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be an integer")
        return int(value)
    return value


def _printable(value: str) -> str:
    """The prompt rule is :data:`~animfleet_api.bounds.PROMPT_PATTERN`; this says which part
    of it a prompt broke."""
    if _PROMPT.match(value):
        return value
    if not value.strip():
        raise ValueError("must not be blank")
    raise ValueError("must not contain control characters other than tab and newline")


def small_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse metadata over :data:`~animfleet_api.bounds.MAX_METADATA_BYTES` serialised (the
    dispatcher checks it per job, so one item does not refuse a whole batch)."""
    if len(repr(value)) > b.MAX_METADATA_BYTES:
        raise ValueError(f"must be at most {b.MAX_METADATA_BYTES // 1024} KiB when serialised")
    return value


def aspect_problem(width: int, height: int) -> str | None:
    """Why ``width`` x ``height`` is refused (a side above 512 px in an unsupported aspect
    ratio), or None."""
    if max(width, height) <= b.FREE_ASPECT_SIDE:
        return None
    if any(width * h == height * w for w, h in b.ASPECT_RATIOS):
        return None
    ratios = ", ".join(f"{w}:{h}" for w, h in b.ASPECT_RATIOS)
    return (
        f"{width}x{height} (width x height) is not a supported aspect ratio for sides above "
        f"{b.FREE_ASPECT_SIDE} px; use {ratios} (e.g. 1024x1024, 800x1000, 576x1024, 1024x576)"
    )


def shown(value: object) -> str:
    """A refused value as an error message quotes it: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Constraints first, the JSON check around them: the schema keeps minimum and maximum.
_INTEGER = BeforeValidator(_json_integer)
Prompt = Annotated[
    str,
    Field(
        min_length=1,
        max_length=b.MAX_PROMPT_CHARS,
        json_schema_extra={"pattern": b.PROMPT_PATTERN},
        description="the motion to animate",
        examples=["pan left slowly"],
    ),
    AfterValidator(_printable),
]
NegativePrompt = Annotated[
    str,
    Field(
        min_length=1,
        max_length=b.MAX_PROMPT_CHARS,
        json_schema_extra={"pattern": b.PROMPT_PATTERN},
        description="what to steer away from (models that read text)",
        examples=["blurry, distorted"],
    ),
    AfterValidator(_printable),
]
Guidance = Annotated[float, Field(ge=0.0, le=b.MAX_GUIDANCE)]
Frames = Annotated[int, Field(ge=b.MIN_FRAMES, le=b.MAX_FRAMES), _INTEGER]
Fps = Annotated[int, Field(ge=b.MIN_FPS, le=b.MAX_FPS), _INTEGER]
Side = Annotated[int, Field(ge=b.MIN_SIDE, le=b.MAX_SIDE, multiple_of=b.SIDE_STEP), _INTEGER]
Seed = Annotated[int, Field(ge=0, le=b.MAX_SEED), _INTEGER]
Steps = Annotated[int, Field(ge=b.MIN_STEPS, le=b.MAX_STEPS), _INTEGER]
Priority = Annotated[int, Field(ge=0, le=b.MAX_PRIORITY), _INTEGER]
Variant = Annotated[str, Field(pattern=b.VARIANT_PATTERN)]
ModelRef = Annotated[str, Field(pattern=b.MODEL_PATTERN)]
Tenant = Annotated[str, Field(pattern=b.TENANT_PATTERN)]
WebhookUrl = Annotated[str, Field(max_length=b.MAX_WEBHOOK_CHARS)]
WebhookEvents = Annotated[list[b.WebhookEvent], Field(min_length=1, max_length=3)]
Deadline = Annotated[float, Field(gt=0, le=b.MAX_DEADLINE_S)]
ImageField = Annotated[
    str, Field(min_length=1, max_length=b.MAX_IMAGE_FIELD_CHARS, pattern=b.IMAGE_PATTERN)
]
AddonName = Annotated[str, Field(pattern=b.ADDON_NAME_PATTERN)]
Scale = Annotated[float, Field(ge=0.0, le=b.MAX_SCALE)]
Speed = Annotated[float, Field(gt=0, le=b.MAX_SPEED)]
Amplitude = Annotated[float, Field(gt=0, le=b.MAX_AMPLITUDE)]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=b.MAX_IDEMPOTENCY_KEY_CHARS)]
