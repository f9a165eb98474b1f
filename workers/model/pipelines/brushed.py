"""A brushed job on the worker: its regions' masks from its inputs, its motion fields from the
template cache, its frames rendered with the model's own motion
(:mod:`workers.model.imaging.brush`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from animfleet.brush import RegionUse, region_input
from animfleet.jobs import JobParams
from workers.model.imaging.brush import BrushPlan, build_motion
from workers.model.imaging.templates import Pixels, TemplateCache


def job_regions(params: JobParams, inputs: Mapping[str, bytes]) -> list[tuple[RegionUse, bytes]]:
    """Each region of the job with its mask's bytes; raises ValueError for a missing mask."""
    found = []
    for index, use in enumerate(params.regions):
        mask = inputs.get(region_input(index))
        if mask is None:
            raise ValueError(f"regions.{index}.mask is not among the job's inputs")
        found.append((use, mask))
    return found


def job_motion(
    animator: Any, image: bytes, frame: Pixels, params: JobParams, inputs: Mapping[str, bytes]
) -> BrushPlan:
    """The job's brushed motion at its size, its trajectories integrated: held in the image's
    template when an earlier job asked for the same regions (masks by content), else built
    now and kept there."""
    regions = job_regions(params, inputs)

    def build(fitted: Pixels) -> BrushPlan:
        return build_motion(fitted, regions, params.frames, params.loop).plan()

    templates: TemplateCache | None = getattr(animator, "templates", None)
    if templates is None:  # a stand-in: nothing to keep it in
        return build(frame)
    # By the digests the record holds (the stored masks were checked against them).
    masks = tuple(use.mask_sha256 or hashlib.sha256(mask).hexdigest() for use, mask in regions)
    uses = tuple(use.model_copy(update={"mask_sha256": None}) for use, _ in regions)
    key = ("brush", params.frames, params.loop, uses, masks)
    return templates.derived(image, params.width, params.height, key, build, params.image_sha256)
