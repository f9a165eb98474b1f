"""A random-weight animation model with Stable Video Diffusion's shape ratios, CPU-sized.

SVD-XT: U-Net channels 320/640/1280/1280 with two layers per block, a 1024-wide context, 64-wide
attention heads, a 4-level (8x) VAE. Here the U-Net is 10x narrower (heads 32 wide, context 96),
the context is a 77-token text encoding plus the image token, and the VAE downsamples 8x like
SVD's (the benchmark's 64x64 frames give 8x8 latents; ``--size 128`` gives 16x16).
"""

from __future__ import annotations

from pathlib import Path

from diffusers import AutoencoderKLTemporalDecoder, UNetSpatioTemporalConditionModel

from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.build import build_pipeline

CONTEXT_DIM = 96
TEXT_TOKENS = 77
CHANNELS = (32, 64, 128, 128)


def _unet() -> UNetSpatioTemporalConditionModel:
    return UNetSpatioTemporalConditionModel(
        sample_size=16,
        in_channels=8,
        out_channels=4,
        down_block_types=(*("CrossAttnDownBlockSpatioTemporal",) * 3, "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", *("CrossAttnUpBlockSpatioTemporal",) * 3),
        block_out_channels=CHANNELS,
        addition_time_embed_dim=32,
        projection_class_embeddings_input_dim=96,
        layers_per_block=2,
        cross_attention_dim=CONTEXT_DIM,
        num_attention_heads=tuple(c // 32 for c in CHANNELS),
        num_frames=14,
    )


def _vae() -> AutoencoderKLTemporalDecoder:
    return AutoencoderKLTemporalDecoder(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        block_out_channels=(32, 64, 64, 64),
        layers_per_block=1,
        latent_channels=4,
        sample_size=128,
    )


def build_bench_pipeline(seed: int = 0) -> AnimationPipeline:
    return build_pipeline(
        seed, unet=_unet, vae=_vae, context_dim=CONTEXT_DIM, text_tokens=TEXT_TOKENS
    )


def save_bench_model(directory: Path) -> Path:
    if not (directory / "model_index.json").exists():
        build_bench_pipeline().save_pretrained(directory, safe_serialization=True)
    return directory
