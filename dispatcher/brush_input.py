"""Motion-brush regions at submit: each region's mask taken off the request, checked like the
job's ``mask`` (errors name ``regions.<i>.mask``) and replaced by its hash; the masks are
stored with the job's inputs (:func:`animfleet.brush.region_input`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from animfleet.brush import RegionUse, region_input
from dispatcher.inputs import InvalidInput
from dispatcher.mask_input import check_mask


def take_region_masks(regions: Any) -> tuple[Any, dict[str, bytes]]:
    """Split the masks off a caller's regions (mappings or models with ``mask``: PNG bytes).

    Returns the regions with each mask replaced by its ``mask_sha256``, and the masks by input
    name. A region without a mask, or one that sets ``mask_sha256`` itself, is refused; anything
    else is left for the request's own validation to judge.
    """
    if not isinstance(regions, Sequence) or isinstance(regions, str | bytes):
        return regions, {}
    plain: list[Any] = []
    masks: dict[str, bytes] = {}
    for index, region in enumerate(regions):
        if isinstance(region, RegionUse):
            fields: dict[str, Any] = region.model_dump(exclude_none=True)
        elif isinstance(region, Mapping):
            fields = dict(region)
        else:
            plain.append(region)
            continue
        if fields.pop("mask_sha256", None) is not None:
            raise InvalidInput(
                f"regions.{index}.mask_sha256",
                "is set by the dispatcher from the mask; send the region's mask as mask",
            )
        mask = fields.pop("mask", None)
        if mask is None:
            raise InvalidInput(f"regions.{index}.mask", "is required: a PNG, white = the region")
        if not isinstance(mask, bytes | bytearray):
            raise InvalidInput(f"regions.{index}.mask", f"must be bytes, got {type(mask).__name__}")
        fields["mask_sha256"] = hashlib.sha256(mask).hexdigest()
        masks[region_input(index)] = bytes(mask)
        plain.append(fields)
    return plain, masks


def check_region_masks(
    masks: Mapping[str, bytes], image_size: tuple[int, int], width: int, height: int
) -> None:
    """Check each region's mask against the image like the job's mask; raises
    :class:`InvalidInput` on ``regions.<i>.mask``."""
    for index in range(len(masks)):
        data = masks[region_input(index)]
        check_mask(data, image_size, width, height, field=f"regions.{index}.mask")
