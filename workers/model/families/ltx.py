"""LTX-Video: a T5-conditioned transformer on a 32x spatial, 8x temporal VAE (frames 8k+1,
sides multiples of 32). ``LTXConditionPipeline`` (0.9.5+) conditions any frame, so a loop
conditions the last frame on the image too."""

from __future__ import annotations

from typing import Any

from PIL import Image

from workers.model.families.base import FamilyPipeline
from workers.model.pipelines.generation import GenerationParams

MAX_TEXT_TOKENS = 128  # the released checkpoints' prompt length


class LTXFamily(FamilyPipeline):
    """``LTXImageToVideoPipeline`` and ``LTXConditionPipeline``."""

    def call_kwargs(self, image: Image.Image, params: GenerationParams) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "prompt": params.prompt,
            "negative_prompt": params.negative_prompt,
            "guidance_scale": params.guidance_scale or self.spec.rules.default_guidance,
            "frame_rate": params.fps,
            "max_sequence_length": MAX_TEXT_TOKENS,
        }
        if self.spec.pipeline_class == "LTXImageToVideoPipeline":
            return {**kwargs, "image": image}
        from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXVideoCondition

        conditions = [LTXVideoCondition(image=image, frame_index=0)]
        if params.loop:  # first = last frame
            conditions.append(LTXVideoCondition(image=image, frame_index=params.num_frames - 1))
        return {**kwargs, "conditions": conditions}
