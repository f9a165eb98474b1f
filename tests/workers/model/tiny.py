"""Tiny spatio-temporal U-Nets for the attention and compile tests (built in milliseconds)."""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import UNetSpatioTemporalConditionModel

CONTEXT_DIM = 16


def tiny_unet(levels: int = 2, context_dim: int = CONTEXT_DIM) -> UNetSpatioTemporalConditionModel:
    """An SVD-shaped U-Net; ``levels=1`` is the smallest graph (for torch.compile tests)."""
    torch.manual_seed(0)
    down = ("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal")[:levels]
    up = ("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal")[-levels:]
    return UNetSpatioTemporalConditionModel(
        sample_size=8,
        in_channels=8,
        out_channels=4,
        down_block_types=down,
        up_block_types=up,
        block_out_channels=(32, 64)[:levels],
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=12,
        layers_per_block=1,
        cross_attention_dim=context_dim,
        num_attention_heads=(2, 4)[:levels],
        num_frames=8,
    ).eval()


def unet_inputs(frames: int, tokens: int, batch: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "sample": torch.randn(batch, frames, 8, 8, 8, generator=generator),
        "timestep": torch.tensor(500),
        "encoder_hidden_states": torch.randn(batch, tokens, CONTEXT_DIM, generator=generator),
        "added_time_ids": torch.randn(batch, 3, generator=generator),
    }


def tiny_student(directory: Path, seed: int = 0) -> Path:
    """A guidance-distilled MotionUNet pipeline with a few thousand random weights (heads
    included, so its frames move), saved for ``from_pretrained``."""
    from diffusers import DPMSolverMultistepScheduler

    from workers.model.networks.motion_unet import MotionUNet
    from workers.model.networks.pixel_codec import PixelCodec
    from workers.model.pipelines.build import CONTEXT_DIM as PIPE_CONTEXT
    from workers.model.pipelines.build import build_pipeline

    def unet() -> MotionUNet:
        return MotionUNet(
            block_out_channels=(8, 16),
            cross_attention_dim=PIPE_CONTEXT,
            embed_dim=16,
            guidance_embedding=True,
        )

    pipe = build_pipeline(seed, unet=unet, vae=PixelCodec)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in pipe.unet.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    pipe.scheduler = DPMSolverMultistepScheduler(
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type="sample",
        use_lu_lambdas=True,
        final_sigmas_type="zero",
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    (directory / "serving.json").write_text('{"steps": 4, "passes_per_step": 1}')
    return directory
