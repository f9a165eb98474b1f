"""Validation at the edge: nothing malformed, oversized or hostile reaches a queue."""

from __future__ import annotations

import io
from typing import Annotated, Any

from PIL import Image, UnidentifiedImageError
from PIL.PngImagePlugin import PngImageFile
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from animfleet.addons import AddonUse, check_addons
from animfleet.brush import RegionUse, check_regions
from animfleet.errors import PermanentError
from animfleet_api import bounds
from animfleet_api.fields import (
    Deadline,
    Fps,
    Frames,
    Guidance,
    ModelRef,
    NegativePrompt,
    Priority,
    Prompt,
    Seed,
    Side,
    Steps,
    Tenant,
    Variant,
    WebhookEvents,
    WebhookUrl,
    aspect_problem,
    small_metadata,
)
from animfleet_api.reasons import refusal
from dispatcher.decode_budget import DECODES
from dispatcher.errors import DispatcherError
from dispatcher.png_pixels import bare_png_header, pixels_intact

ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP")
MAX_IMAGE_BYTES = 10 * 2**20
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_IMAGE_SIDE = 8192


def default_size(
    image_width: int, image_height: int, width: int | None = None, height: int | None = None
) -> tuple[int, int]:
    """(width, height) of a job whose request omits one or both: neither given, the long side
    :data:`~animfleet_api.bounds.DEFAULT_LONG_SIDE` with the image's aspect ratio; one given,
    the other follows the image's aspect ratio. Computed sides are multiples of 8 within the
    served sizes; a given side is returned as given (validation judges it)."""
    if width is not None and height is not None:
        return width, height

    def side(value: float) -> int:
        step = bounds.SIDE_STEP
        return min(bounds.MAX_SIDE, max(bounds.MIN_SIDE, round(value / step) * step))

    if width is not None:
        return width, side(width * image_height / image_width)
    if height is not None:
        return side(height * image_width / image_height), height
    scale = bounds.DEFAULT_LONG_SIDE / max(image_width, image_height)
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
    then the whole image is decoded (a plain PNG's pixel stream inflated a slice at a time and
    its rows checked, :mod:`dispatcher.png_pixels`; any other image by Pillow; either within
    the process's :data:`dispatcher.decode_budget.DECODES`), so a truncated file is refused here
    rather than on a GPU. Slow for a large image (a 4096x4096 one takes about half a second):
    call it from a worker thread, never an event loop; the inflate and Pillow's decoders let
    other threads run meanwhile.
    ``field``: the request field errors name (another image of the job, e.g. a control image).
    """
    if not isinstance(data, bytes | bytearray):
        raise InvalidInput(field, f"must be bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise InvalidInput(field, "is empty")
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidInput(field, f"is {len(data)} bytes; the limit is {MAX_IMAGE_BYTES}")
    data = bytes(data)
    # A bare PNG within the limits is read as Pillow would read it, without Pillow; an image
    # that check cannot vouch for (and every refusal) goes the way below.
    size = bare_png_header(data)
    if size is not None and _within_limits(*size):
        with DECODES.hold(size[0] * size[1]):
            if pixels_intact(data):
                return "PNG", *size
    try:
        # Only the three formats' parsers ever see the bytes; the size is checked against our
        # own limit (far below Pillow's bomb warning) before a pixel is decoded.
        with Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS) as image:
            fmt, (width, height) = image.format or "?", image.size
            if not _within_limits(width, height):
                raise InvalidInput(
                    field,
                    f"is {width}x{height} pixels; the limit is {MAX_IMAGE_PIXELS} pixels "
                    f"and {MAX_IMAGE_SIDE} per side",
                )
            # A plain PNG's pixel stream is checked without unpacking it into an image; any
            # other image (or a PNG that check cannot vouch for) is decoded in full.
            with DECODES.hold(width * height):
                if not (isinstance(image, PngImageFile) and pixels_intact(data, image)):
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


def _within_limits(width: int, height: int) -> bool:
    return (
        width <= MAX_IMAGE_SIDE and height <= MAX_IMAGE_SIDE and width * height <= MAX_IMAGE_PIXELS
    )


class AnimationRequest(BaseModel):
    """What a caller may ask for, with the wire contract's fields (:mod:`animfleet_api.fields`);
    defaults suit the shipped model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: Prompt
    frames: Frames = bounds.DEFAULT_FRAMES
    fps: Fps = bounds.DEFAULT_FPS
    # Client.submit fills omitted sides from the image (:func:`default_size`).
    width: Side = bounds.DEFAULT_LONG_SIDE
    height: Side = bounds.DEFAULT_LONG_SIDE
    seed: Seed | None = None
    steps: Steps | None = None
    variant: Variant | None = None
    # A deployment of the region ("default" when omitted and the region has one) or a pinned
    # version "name@version"; checked against the region when the job is placed.
    model: ModelRef | None = None
    # Motion add-ons by name and strength; checked against the region when the job is placed.
    addons: tuple[AddonUse, ...] = ()
    # Motion-brush regions (masks taken off by dispatcher.brush_input) and a seamless loop.
    regions: tuple[RegionUse, ...] = ()
    loop: bool = False
    # What a generative family reads besides the prompt (checked against it at placement).
    negative_prompt: NegativePrompt | None = None
    guidance: Guidance | None = None
    webhook_url: WebhookUrl | None = None
    webhook_events_filter: WebhookEvents | None = None
    # Seconds from submission: not started by then -> expired; not finished -> canceled.
    start_deadline: Deadline | None = None
    deadline: Deadline | None = None
    metadata: Annotated[dict[str, Any], AfterValidator(small_metadata)] = Field(
        default_factory=dict
    )
    # Fair share: until API keys name tenants, a request field (the scheduler's unit of share).
    tenant: Tenant = bounds.DEFAULT_TENANT
    priority: Priority = bounds.DEFAULT_PRIORITY

    @model_validator(mode="after")
    def _aspect_ratio(self) -> AnimationRequest:
        problem = aspect_problem(self.width, self.height)
        if problem is not None:
            raise PydanticCustomError("aspect_ratio", problem)
        return self

    @field_validator("addons")
    @classmethod
    def _few_distinct_addons(cls, value: tuple[AddonUse, ...]) -> tuple[AddonUse, ...]:
        return check_addons(value)

    @field_validator("regions")
    @classmethod
    def _few_regions(cls, value: tuple[RegionUse, ...]) -> tuple[RegionUse, ...]:
        return check_regions(value)


def parse_request(**fields: Any) -> AnimationRequest:
    """Build an :class:`AnimationRequest`, turning pydantic's errors into :class:`InvalidInput`."""
    try:
        return AnimationRequest(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        if first["type"] == "aspect_ratio":
            raise InvalidInput("width", first["msg"]) from None
        field = ".".join(str(part) for part in first["loc"]) or "request"
        raise InvalidInput(field, refusal(first)) from None
