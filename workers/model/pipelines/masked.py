"""Mask-aware animation: the model runs on the mask's box only, from the image's template.

Outside the mask every frame is the input image exactly (the fitted frame the plain path would
animate); inside it the model's frames of the box are blended in with a feathered seam
(:mod:`workers.model.imaging.mask`). The fitted frame and the box's conditioning features come from
the worker's template cache (:mod:`workers.model.imaging.templates`), built in the background.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from animfleet.jobs import JobParams
from workers.model.imaging.mask import MaskRegion, mask_region, paste
from workers.model.imaging.templates import (
    Encode,
    Features,
    Pixels,
    Regionize,
    Request,
    Template,
    TemplateCache,
    content_hash,
)
from workers.model.pipelines.animation import StepCallback, pixels_of

if TYPE_CHECKING:
    from concurrent.futures import Future


class Animator(Protocol):
    """What a masked job needs of the worker's animator (:class:`workers.model.Animator`)."""

    pipeline: Any
    templates: TemplateCache

    def run_frames(
        self,
        pixels: Pixels,
        params: JobParams,
        on_step: StepCallback | None = None,
        features: Features | None = None,
    ) -> Pixels: ...


def regionizer(pipeline: Any) -> Regionize:
    """Fits a mask to a frame for ``pipeline``: its box at the model's size multiple."""
    multiple = size_multiple(pipeline)

    def regionize(mask: bytes, width: int, height: int) -> MaskRegion:
        return mask_region(mask, width, height, multiple)

    return regionize


def size_multiple(pipeline: Any) -> int:
    """What the box's sides must divide by: the pipeline's multiple, and the denoiser's own
    (a MotionUNet's patchify and levels) times the VAE's downsampling."""
    multiple = int(getattr(pipeline, "size_multiple", 8))
    denoiser = getattr(getattr(pipeline, "unet", None), "size_multiple", None)
    if denoiser is None:
        return multiple
    vae_levels = len(pipeline.vae.config.block_out_channels) - 1
    return math.lcm(multiple, int(denoiser) * 2**vae_levels)


def prefetch(
    animator: object, image: bytes, mask: bytes | None, params: JobParams
) -> Future[Template] | None:
    """Start building the job's template in the background (before the job needs it); an
    animator without a template cache (a stand-in) builds none."""
    templates: TemplateCache | None = getattr(animator, "templates", None)
    if templates is None:
        return None
    return templates.prefetch(image, params.width, params.height, mask, digests_of(params))


def digests_of(params: JobParams) -> tuple[str | None, str | None]:
    """The image's and the mask's sha256 from the job's record (computed once, at submit)."""
    return params.image_sha256, params.mask


def encoder(pipeline: object) -> Encode | None:
    """``pipeline.image_features`` as a template encoder, or ``None`` for a pipeline that
    conditions on the image some other way (an SVD checkpoint): only frames are cached."""
    features = getattr(pipeline, "image_features", None)
    if features is None:
        return None
    device = getattr(pipeline, "device", "cpu")

    def encode(crop: Pixels) -> Features:
        latent, token = features(pixels_of(crop, device))
        return latent, token

    return encode


@dataclass(frozen=True)
class CropInput:
    """What the model runs on for a masked job, and what its frames are pasted back into."""

    frame: Pixels  # the whole fitted input frame
    region: MaskRegion
    crop: Pixels  # the frame's pixels in the region's box
    features: Features | None  # the box's image features, when the pipeline takes them


def crop_input(animator: Animator, image: bytes, mask: bytes, params: JobParams) -> CropInput:
    """The job's box, from its template (built now, or held). Raises ValueError for a mask
    that animates nothing at the job's size."""
    size, digests = (params.width, params.height), digests_of(params)
    template = animator.templates.prefetch(image, *size, mask, digests).result()
    request = Request(params.width, params.height, digests[1] or content_hash(mask))
    frame, region = template.frames[request.size], template.regions[request]
    rows, cols = region.box.slices
    crop = np.ascontiguousarray(frame[rows, cols])
    return CropInput(frame, region, crop, template.box_features(request))


def whole_frame(
    animator: Animator, image: bytes, params: JobParams
) -> tuple[Pixels, Features | None]:
    """An unmasked job's fitted frame and its features, from its template (built now, or
    held): what ``prepare_image`` and the pipeline's own encoders would compute."""
    size, digests = (params.width, params.height), digests_of(params)
    template = animator.templates.prefetch(image, *size, None, digests).result()
    request = Request(params.width, params.height)
    return template.frames[request.size], template.box_features(request)


def animate_masked(
    animator: Animator,
    image: bytes,
    mask: bytes,
    params: JobParams,
    on_step: StepCallback | None = None,
) -> npt.NDArray[np.uint8]:
    """Frames (T, H, W, 3) of a masked job: the model's frames of the mask's box blended into
    the input image, which every frame shows exactly outside the mask. Raises ValueError for a
    mask that animates nothing at the job's size."""
    box = crop_input(animator, image, mask, params)
    crop_frames = animator.run_frames(box.crop, params, on_step, box.features)
    return paste(crop_frames, box.frame, box.region)
