"""Stable Video Diffusion: image-only conditioning (no prompt), a U-Net, and image guidance
whose scale rises linearly over the frames from 1 to the job's guidance."""

from __future__ import annotations

from typing import Any

from PIL import Image

from workers.model.families.base import FamilyPipeline
from workers.model.pipelines.generation import GenerationParams


class SVDFamily(FamilyPipeline):
    """``StableVideoDiffusionPipeline``."""

    def __init__(self, pipe: Any, spec: Any) -> None:
        super().__init__(pipe, spec)
        self.unet = pipe.unet

    def call_kwargs(self, image: Image.Image, params: GenerationParams) -> dict[str, Any]:
        return {
            "image": image,
            "min_guidance_scale": 1.0,
            "max_guidance_scale": params.guidance_scale or params.image_guidance_scale,
            "fps": params.fps,
            "decode_chunk_size": params.num_frames,
        }
