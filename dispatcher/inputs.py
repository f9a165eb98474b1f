"""Validation at the edge: nothing malformed, oversized or hostile reaches a queue."""

from __future__ import annotations

import io
from typing import Annotated, Any, Literal

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from animfleet.addons import AddonUse, check_addons
from animfleet.brush import RegionUse, check_regions
from animfleet.errors import PermanentError
from animfleet.jobs import DEFAULT_PRIORITY, DEFAULT_TENANT, MAX_PRIORITY
from animfleet.versions import MODEL_FIELD
from dispatcher.errors import DispatcherError

ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP")
MAX_IMAGE_BYTES = 10 * 2**20
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_IMAGE_SIDE = 8192
MAX_PROMPT_CHARS = 500
MAX_DEADLINE_S = 7 * 24 * 3600

# Sides up to 512 accept any aspect ratio (as always); larger ones one of ASPECT_RATIOS. The
# worker runs the model at a small working size and renders frames at the requested size.
MAX_SIDE = 1024
FREE_ASPECT_SIDE = 512
ASPECT_RATIOS = ((1, 1), (4, 5), (9, 16), (16, 9))  # width:height
MIN_SIDE = 32
Side = Annotated[int, Field(ge=MIN_SIDE, le=MAX_SIDE, multiple_of=8)]
# A request without width and height gets this long side and the image's aspect ratio.
DEFAULT_LONG_SIDE = 512


def aspect_problem(width: int, height: int) -> str | None:
    """Why ``width`` x ``height`` is refused (a side above 512 px in an unsupported aspect
    ratio), or None."""
    if max(width, height) <= FREE_ASPECT_SIDE:
        return None
    if any(width * h == height * w for w, h in ASPECT_RATIOS):
        return None
    ratios = ", ".join(f"{w}:{h}" for w, h in ASPECT_RATIOS)
    return (
        f"{width}x{height} (width x height) is not a supported aspect ratio for sides above "
        f"{FREE_ASPECT_SIDE} px; use {ratios} (e.g. 1024x1024, 800x1000, 576x1024, 1024x576)"
    )


def default_size(
    image_width: int, image_height: int, width: int | None = None, height: int | None = None
) -> tuple[int, int]:
    """(width, height) of a job whose request omits one or both: neither given, the long side
    :data:`DEFAULT_LONG_SIDE` with the image's aspect ratio; one given, the other follows the
    image's aspect ratio. Computed sides are multiples of 8 within the served sizes; a given
    side is returned as given (validation judges it)."""
    if width is not None and height is not None:
        return width, height

    def side(value: float) -> int:
        return min(MAX_SIDE, max(MIN_SIDE, round(value / 8) * 8))

    if width is not None:
        return width, side(width * image_height / image_width)
    if height is not None:
        return side(height * image_width / image_height), height
    scale = DEFAULT_LONG_SIDE / max(image_width, image_height)
    return side(image_width * scale), side(image_height * scale)


class InvalidInput(DispatcherError, PermanentError, ValueError):
    """A request field failed validation; ``field`` names it, the message names the value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_image(data: bytes, field: str = "image") -> tuple[str, int, int]:
    """Return (format, width, height) of a safe-to-decode image, or raise :class:`InvalidInput`.

    The header is read first, so a decompression bomb is refused before any pixel is decoded;
    then the whole image is decoded, so a truncated file is refused here rather than on a GPU.
    ``field``: the request field errors name (another image of the job, e.g. a control image).
    """
    if not isinstance(data, bytes | bytearray):
        raise InvalidInput(field, f"must be bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise InvalidInput(field, "is empty")
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidInput(field, f"is {len(data)} bytes; the limit is {MAX_IMAGE_BYTES}")
    try:
        # Only the three formats' parsers ever see the bytes; the size is checked against our
        # own limit (far below Pillow's bomb warning) before a pixel is decoded.
        with Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS) as image:
            fmt, (width, height) = image.format or "?", image.size
            if (
                width > MAX_IMAGE_SIDE
                or height > MAX_IMAGE_SIDE
                or width * height > MAX_IMAGE_PIXELS
            ):
                raise InvalidInput(
                    field,
                    f"is {width}x{height} pixels; the limit is {MAX_IMAGE_PIXELS} pixels "
                    f"and {MAX_IMAGE_SIDE} per side",
                )
            image.load()
    except InvalidInput:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise InvalidInput(
            field, f"is larger than the limit of {MAX_IMAGE_PIXELS} pixels ({error})"
        ) from None
    except UnidentifiedImageError:
        raise InvalidInput(field, f"is not a PNG, JPEG or WebP image ({len(data)} bytes)") from None
    except (OSError, SyntaxError, ValueError) as error:
        raise InvalidInput(field, f"could not be decoded: {error}") from None
    return fmt, width, height


class AnimationRequest(BaseModel):
    """What a caller may ask for; defaults suit the shipped model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    frames: int = Field(default=8, ge=2, le=32)
    fps: int = Field(default=8, ge=1, le=60)
    # Client.submit fills omitted sides from the image (:func:`default_size`).
    width: Side = DEFAULT_LONG_SIDE
    height: Side = DEFAULT_LONG_SIDE
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    steps: int | None = Field(default=None, ge=1, le=100)
    variant: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    # A deployment of the region ("default" when omitted and the region has one) or a pinned
    # version "name@version"; checked against the region when the job is placed.
    model: str | None = Field(default=None, pattern=MODEL_FIELD)
    # Motion add-ons by name and strength; checked against the region when the job is placed.
    addons: tuple[AddonUse, ...] = ()
    # Motion-brush regions (masks taken off by dispatcher.brush_input) and a seamless loop.
    regions: tuple[RegionUse, ...] = ()
    loop: bool = False
    webhook_url: str | None = Field(default=None, max_length=2048)
    webhook_events_filter: list[Literal["start", "progress", "completed"]] | None = Field(
        default=None, min_length=1, max_length=3
    )
    # Seconds from submission: not started by then -> expired; not finished -> canceled.
    start_deadline: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_S)
    deadline: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_S)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Fair share: until API keys name tenants, a request field (the scheduler's unit of share).
    tenant: str = Field(default=DEFAULT_TENANT, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    priority: int = Field(default=DEFAULT_PRIORITY, ge=0, le=MAX_PRIORITY)

    @model_validator(mode="after")
    def _aspect_ratio(self) -> AnimationRequest:
        problem = aspect_problem(self.width, self.height)
        if problem is not None:
            raise PydanticCustomError("aspect_ratio", problem)
        return self

    @field_validator("prompt")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        if any(ord(ch) < 32 and ch not in "\t\n" for ch in value):
            raise ValueError("must not contain control characters")
        return value

    @field_validator("addons")
    @classmethod
    def _few_distinct_addons(cls, value: tuple[AddonUse, ...]) -> tuple[AddonUse, ...]:
        return check_addons(value)

    @field_validator("regions")
    @classmethod
    def _few_regions(cls, value: tuple[RegionUse, ...]) -> tuple[RegionUse, ...]:
        return check_regions(value)

    @field_validator("metadata")
    @classmethod
    def _small_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(repr(value)) > 4096:
            raise ValueError("must be at most 4 KiB when serialised")
        return value


def parse_request(**fields: Any) -> AnimationRequest:
    """Build an :class:`AnimationRequest`, turning pydantic's errors into :class:`InvalidInput`."""
    try:
        return AnimationRequest(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        if first["type"] == "aspect_ratio":
            raise InvalidInput("width", first["msg"]) from None
        field = ".".join(str(part) for part in first["loc"]) or "request"
        value = first.get("input")
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise InvalidInput(field, f"{first['msg']} (got {shown})") from None
