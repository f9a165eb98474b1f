"""Tiny random-weight checkpoints of every served image-to-video family, built offline.

Each is the family's own diffusers pipeline, assembled from its own config classes (transformer,
VAE, scheduler; a transformers text encoder with a word-level tokenizer built in code) and
written with ``save_pretrained``, so its ``model_index.json`` names the real pipeline class and a
worker loads it exactly as it loads a downloaded checkpoint. The sizes are the smallest that keep
each architecture's shape rules: a 32x32, 9-frame video renders in about a second on one core.
Speed does not depend on the weights' values, so the same builders at real sizes measure speed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from diffusers import (
    AutoencoderKLCogVideoX,
    AutoencoderKLLTXVideo,
    AutoencoderKLWan,
    CogVideoXDDIMScheduler,
    CogVideoXImageToVideoPipeline,
    CogVideoXTransformer3DModel,
    FlowMatchEulerDiscreteScheduler,
    LTXConditionPipeline,
    LTXImageToVideoPipeline,
    LTXVideoTransformer3DModel,
    WanImageToVideoPipeline,
    WanTransformer3DModel,
)
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    CLIPVisionModelWithProjection,
    T5Config,
    T5EncoderModel,
)

from animfleet.families import FAMILIES, family_of
from workers.model.networks.tokenizer import build_tokenizer
from workers.model.pipelines.build import build_svd_pipeline

TEXT_DIM = 32  # the tiny T5's width, which every family's text projection takes


def _text_encoder() -> tuple[T5EncoderModel, Any]:
    config = T5Config(
        vocab_size=128,
        d_model=TEXT_DIM,
        d_kv=8,
        d_ff=37,
        num_layers=1,
        num_heads=4,
        relative_attention_num_buckets=8,
    )
    return T5EncoderModel(config), build_tokenizer(max_length=128)


def _ltx_parts() -> dict[str, Any]:
    transformer = LTXVideoTransformer3DModel(
        in_channels=8,
        out_channels=8,
        patch_size=1,
        patch_size_t=1,
        num_attention_heads=4,
        attention_head_dim=8,
        cross_attention_dim=32,
        num_layers=1,
        caption_channels=TEXT_DIM,
    )
    vae = AutoencoderKLLTXVideo(
        in_channels=3,
        out_channels=3,
        latent_channels=8,
        block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8),
        layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False),
        decoder_inject_noise=(False,) * 5,
        upsample_residual=(False,) * 4,
        upsample_factor=(1, 1, 1, 1),
        timestep_conditioning=False,
        patch_size=1,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
    )
    text_encoder, tokenizer = _text_encoder()
    return {
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "transformer": transformer,
    }


def build_ltx() -> LTXImageToVideoPipeline:
    """LTX-Video's image-to-video pipeline (a 4x spatial, 4x temporal VAE here; 32x, 8x real)."""
    return LTXImageToVideoPipeline(**_ltx_parts())


def build_ltx_condition() -> LTXConditionPipeline:
    """LTX-Video's condition pipeline (0.9.5+): conditions at any frame, so loops."""
    return LTXConditionPipeline(**_ltx_parts())


def _wan_transformer(image_dim: int | None) -> WanTransformer3DModel:
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=36,
        out_channels=16,
        text_dim=TEXT_DIM,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
        image_dim=image_dim,
    )


def _wan_vae() -> AutoencoderKLWan:
    return AutoencoderKLWan(
        base_dim=3,
        z_dim=16,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    )


def build_wan() -> WanImageToVideoPipeline:
    """Wan 2.1 image-to-video: a CLIP image encoder beside the text (first-and-last-frame
    checkpoints have the same layout)."""
    text_encoder, tokenizer = _text_encoder()
    image_encoder = CLIPVisionModelWithProjection(
        CLIPVisionConfig(
            hidden_size=4,
            projection_dim=4,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            intermediate_size=16,
            patch_size=1,
        )
    )
    return WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=_wan_vae(),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        image_processor=CLIPImageProcessor(crop_size=32, size=32),
        image_encoder=image_encoder,
        transformer=_wan_transformer(image_dim=4),
    )


def build_wan22() -> WanImageToVideoPipeline:
    """Wan 2.2 image-to-video (A14B layout): no image encoder, a high-noise and a low-noise
    transformer split at ``boundary_ratio``."""
    text_encoder, tokenizer = _text_encoder()
    return WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=_wan_vae(),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        transformer=_wan_transformer(image_dim=None),
        transformer_2=_wan_transformer(image_dim=None),
        boundary_ratio=0.875,
    )


def build_cogvideox() -> CogVideoXImageToVideoPipeline:
    """CogVideoX 1.5-style image-to-video: rotary positions only, so any size of its multiple."""
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=8,
        out_channels=4,
        time_embed_dim=2,
        text_embed_dim=TEXT_DIM,
        num_layers=1,
        sample_width=4,
        sample_height=4,
        sample_frames=9,
        patch_size=2,
        temporal_compression_ratio=4,
        max_text_seq_length=16,
        use_rotary_positional_embeddings=True,
        use_learned_positional_embeddings=False,
    )
    vae = AutoencoderKLCogVideoX(
        in_channels=3,
        out_channels=3,
        down_block_types=("CogVideoXDownBlock3D",) * 4,
        up_block_types=("CogVideoXUpBlock3D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=2,
        temporal_compression_ratio=4,
    )
    text_encoder, tokenizer = _text_encoder()
    return CogVideoXImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=CogVideoXDDIMScheduler(),
    )


# Builders by the name ``animfleet model init --family`` takes.
BUILDERS: dict[str, Callable[[], Any]] = {
    "svd": build_svd_pipeline,
    "ltx": build_ltx,
    "ltx-condition": build_ltx_condition,
    "wan": build_wan,
    "wan2.2": build_wan22,
    "cogvideox": build_cogvideox,
}


def build_tiny(name: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny random-weight checkpoint ``name`` (a key of :data:`BUILDERS`, a family's
    name or its pipeline class name) to ``out_dir``; returns it. Raises ValueError for a name
    none of them is."""
    builder = BUILDERS.get(name)
    if builder is None:
        family = family_of(name) if name in FAMILIES else None
        family = family or next((f for f in FAMILIES.values() if f.name == name), None)
        builder = BUILDERS.get(family.name) if family else None
    if builder is None:
        raise ValueError(f"no tiny checkpoint {name!r}; one of {sorted(BUILDERS)}")
    torch.manual_seed(seed)
    pipe = builder()
    path = Path(out_dir)
    pipe.save_pretrained(path, safe_serialization=True)
    return path
