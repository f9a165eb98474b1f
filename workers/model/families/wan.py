"""Wan 2.1 and 2.2 image-to-video: a UMT5-conditioned transformer (2.2: a high-noise and a
low-noise expert) on an 8x spatial, 4x temporal VAE (frames 4k+1, sides multiples of 16).
``last_image`` conditions the last frame (first-and-last-frame), which a loop uses."""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image

from workers.model.families.base import FamilyPipeline
from workers.model.pipelines.generation import GenerationParams

MAX_TEXT_TOKENS = 512  # the released checkpoints' prompt length


class WanFamily(FamilyPipeline):
    """``WanImageToVideoPipeline``."""

    def call_kwargs(self, image: Image.Image, params: GenerationParams) -> dict[str, Any]:
        guidance = params.guidance_scale or self.spec.rules.default_guidance
        prompt, negative = self.text_embeds(params.prompt), self.text_embeds(params.negative_prompt)
        kwargs: dict[str, Any] = {
            "image": image,
            "prompt_embeds": prompt,
            "negative_prompt_embeds": negative,
            "guidance_scale": guidance,
            "max_sequence_length": MAX_TEXT_TOKENS,
        }
        if self.pipe.transformer_2 is not None:
            kwargs["guidance_scale_2"] = guidance
        if params.loop:
            kwargs["last_image"] = image
        return kwargs

    def text_embeds(self, text: str) -> torch.Tensor:
        """The prompt's embeddings as Wan's pipeline computes them (real tokens, zero-padded),
        without its optional text clean-up package."""
        tokens = self.pipe.tokenizer(
            [text],
            padding="max_length",
            max_length=MAX_TEXT_TOKENS,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        encoder = self.pipe.text_encoder
        device = next(encoder.parameters()).device
        with torch.inference_mode():
            hidden = encoder(tokens.input_ids.to(device), tokens.attention_mask.to(device))
        length = int(tokens.attention_mask.gt(0).sum())
        embeds = torch.zeros_like(hidden.last_hidden_state)
        embeds[:, :length] = hidden.last_hidden_state[:, :length]
        return embeds.to(self.pipe.transformer.dtype)
