"""CogVideoX image-to-video: a T5-conditioned transformer on an 8x spatial, 4x temporal VAE
(frames 4k+1 up to the checkpoint's ``sample_frames``; 1.0's learned positional embeddings fix
the size too)."""

from __future__ import annotations

from typing import Any

from PIL import Image

from workers.model.families.base import FamilyPipeline
from workers.model.pipelines.generation import GenerationParams


class CogVideoXFamily(FamilyPipeline):
    """``CogVideoXImageToVideoPipeline``."""

    def call_kwargs(self, image: Image.Image, params: GenerationParams) -> dict[str, Any]:
        return {
            "image": image,
            "prompt": params.prompt,
            "negative_prompt": params.negative_prompt,
            "guidance_scale": params.guidance_scale or self.spec.rules.default_guidance,
            "max_sequence_length": int(self.pipe.transformer.config.max_text_seq_length),
        }
