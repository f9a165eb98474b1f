"""Tiny spatio-temporal U-Nets for the attention and compile tests (built in milliseconds)."""

from __future__ import annotations

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
