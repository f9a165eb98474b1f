"""HunyuanVideo image-to-video: a Llava-conditioned (plus CLIP) transformer on an 8x spatial,
4x temporal VAE (frames 4k+1, sides multiples of 16); true CFG with a negative prompt, else the
distilled embedded guidance."""

from __future__ import annotations

from typing import Any

from PIL import Image

from workers.model.families.base import FamilyPipeline
from workers.model.pipelines.generation import GenerationParams


class HunyuanFamily(FamilyPipeline):
    """``HunyuanVideoImageToVideoPipeline``."""

    def call_kwargs(self, image: Image.Image, params: GenerationParams) -> dict[str, Any]:
        guidance = params.guidance_scale or self.spec.rules.default_guidance
        kwargs: dict[str, Any] = {"image": image, "prompt": params.prompt}
        if params.negative_prompt:
            kwargs.update(negative_prompt=params.negative_prompt, true_cfg_scale=guidance)
        else:
            kwargs["guidance_scale"] = guidance
        return kwargs
