"""A tiny random-weight LTX-Video image-to-video pipeline for the serving-profile tests.

Built from diffusers' own config classes and saved with ``save_pretrained`` (no download);
the prompt goes in as embeddings, so no text encoder or tokenizer is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from diffusers import (
    AutoencoderKLLTXVideo,
    FlowMatchEulerDiscreteScheduler,
    LTXImageToVideoPipeline,
    LTXVideoTransformer3DModel,
)
from PIL import Image

FRAMES, SIZE, STEPS = 9, 32, 6


def build_tiny_ltx(path: Path) -> Path:
    """Save a tiny LTX image-to-video pipeline (4 transformer blocks) under ``path``."""
    torch.manual_seed(0)
    transformer = LTXVideoTransformer3DModel(
        in_channels=8,
        out_channels=8,
        patch_size=1,
        patch_size_t=1,
        num_attention_heads=4,
        attention_head_dim=16,
        cross_attention_dim=64,
        num_layers=4,
        caption_channels=32,
    )
    five = (1, 1, 1, 1, 1)
    vae = AutoencoderKLLTXVideo(
        latent_channels=8,
        block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8),
        layers_per_block=five,
        decoder_layers_per_block=five,
        spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False),
        decoder_inject_noise=(False,) * 5,
        upsample_residual=(False,) * 4,
        upsample_factor=(1,) * 4,
        timestep_conditioning=False,
        patch_size=1,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
    )
    pipe = LTXImageToVideoPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=None,
        tokenizer=None,
        transformer=transformer,
    )
    pipe.save_pretrained(path)
    return path


def load_tiny_ltx(path: Path) -> Any:
    pipe = LTXImageToVideoPipeline.from_pretrained(path, text_encoder=None, tokenizer=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def render_tiny_ltx(pipe: Any, seed: int = 0, steps: int = STEPS) -> npt.NDArray[np.uint8]:
    """One video with fixed inputs: frames (T, H, W, 3) uint8."""
    inputs = torch.Generator().manual_seed(1)
    image = Image.fromarray(
        (torch.rand(SIZE, SIZE, 3, generator=inputs) * 255).to(torch.uint8).numpy()
    )
    embeddings = torch.randn(1, 8, 32, generator=inputs)
    mask = torch.ones(1, 8)
    frames = pipe(
        image=image,
        prompt_embeds=embeddings,
        prompt_attention_mask=mask,
        negative_prompt_embeds=torch.zeros_like(embeddings),
        negative_prompt_attention_mask=mask,
        height=SIZE,
        width=SIZE,
        num_frames=FRAMES,
        num_inference_steps=steps,
        guidance_scale=3.0,
        generator=torch.Generator().manual_seed(seed),
        output_type="np",
    ).frames[0]
    video: npt.NDArray[np.uint8] = (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)
    return video
