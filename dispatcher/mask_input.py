"""The optional ``mask`` of a job, checked at the edge: a PNG that lines up with the image and
animates at least one pixel at the job's size. Every refusal names the field and the value."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from PIL import Image

from animfleet.addons import AddonUse, control_input
from animfleet.masks import coverage, decode_mask, same_aspect
from dispatcher.inputs import InvalidInput, check_image


@dataclass(frozen=True)
class CheckedMask:
    """A mask that passed: its hash (recorded on the job) and the share of frame it animates."""

    sha256: str
    coverage: float


def check_mask(
    data: bytes, image_size: tuple[int, int], width: int, height: int, field: str = "mask"
) -> CheckedMask:
    """Check ``data`` as the mask of an image of ``image_size`` (width, height) animated at
    ``width`` x ``height``; raises :class:`InvalidInput` on ``field`` (``mask``, or a
    brushed region's ``regions.<i>.mask``).

    The mask must be a PNG (white = animate) of the image's size or of its aspect ratio (it is
    then resized with it), and white somewhere once fitted to the frame: a mask that animates
    nothing is refused rather than run as a still video.
    """
    if not isinstance(data, bytes | bytearray):
        raise InvalidInput(field, f"must be bytes, got {type(data).__name__}")
    try:
        fmt, mask_width, mask_height = check_image(bytes(data))
    except InvalidInput as error:
        raise InvalidInput(field, error.message) from None
    if fmt != "PNG":
        raise InvalidInput(field, f"must be a PNG (white = animate), got {fmt}")
    size = (mask_width, mask_height)
    if size != image_size and not same_aspect(size, image_size):
        raise InvalidInput(
            field,
            f"is {mask_width}x{mask_height} pixels; it must be the image's size "
            f"({image_size[0]}x{image_size[1]}) or have its aspect ratio",
        )
    try:
        grey = decode_mask(bytes(data))
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise InvalidInput(field, f"could not be decoded: {error}") from None
    share = coverage(grey, width, height)
    if not share:
        lightest = grey.getextrema()[1]
        raise InvalidInput(
            field,
            f"animates no pixel at {width}x{height} (its lightest grey is {lightest}; white, "
            "at least 128, animates)"
            + (": send no mask to animate the whole image" if field == "mask" else ""),
        )
    return CheckedMask(hashlib.sha256(bytes(data)).hexdigest(), share)


def check_mask_addons(addons: Sequence[AddonUse], controls: Mapping[str, bytes]) -> None:
    """Refuse a masked job's image-conditioned add-on (one that brought a control image) on
    its field ``addons.<i>``: a masked job runs the model on the mask's box, which the
    whole-frame control image does not describe, so the worker would fail it."""
    for index, addon in enumerate(addons):
        if control_input(addon.name) in controls:
            raise InvalidInput(
                f"addons.{index}",
                f"{addon.name!r} takes a control image, which a job with a mask cannot use "
                "yet; send the job without the mask or without this add-on",
            )
