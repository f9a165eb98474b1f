"""Build a small animation pipeline from config, with random weights (``animfleet model init``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from diffusers import (
    AutoencoderKLTemporalDecoder,
    DPMSolverMultistepScheduler,
    EulerDiscreteScheduler,
    StableVideoDiffusionPipeline,
    UNetSpatioTemporalConditionModel,
)
from transformers import (
    CLIPImageProcessor,
    CLIPTextConfig,
    CLIPTextModel,
    CLIPVisionConfig,
    CLIPVisionModelWithProjection,
)

from workers.model.networks.tokenizer import build_tokenizer
from workers.model.pipelines.animation import AnimationPipeline

CONTEXT_DIM = 32
TEXT_TOKENS = 16


def _small_unet() -> UNetSpatioTemporalConditionModel:
    return UNetSpatioTemporalConditionModel(
        sample_size=16,
        in_channels=8,
        out_channels=4,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        block_out_channels=(32, 64),
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=24,
        layers_per_block=1,
        cross_attention_dim=CONTEXT_DIM,
        num_attention_heads=(2, 4),
        num_frames=8,
    )


def _small_vae() -> AutoencoderKLTemporalDecoder:
    return AutoencoderKLTemporalDecoder(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 3,
        block_out_channels=(32, 32, 32),
        layers_per_block=1,
        latent_channels=4,
        sample_size=64,
    )


def build_pipeline(
    seed: int = 0,
    *,
    unet: Callable[[], torch.nn.Module] = _small_unet,
    vae: Callable[[], torch.nn.Module] = _small_vae,
    context_dim: int = CONTEXT_DIM,
    text_tokens: int = TEXT_TOKENS,
) -> AnimationPipeline:
    """A CPU-sized SVD-style pipeline: 4x VAE downsampling, a two-level spatio-temporal U-Net.

    ``unet`` and ``vae`` build other denoisers and VAEs (after seeding, so weights repeat);
    ``context_dim`` must then be their cross-attention width.
    """
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(max_length=text_tokens)
    denoiser, autoencoder = unet(), vae()  # in this order: the same weights as before for a seed
    image_encoder = CLIPVisionModelWithProjection(
        CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
            projection_dim=context_dim,
        )
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=context_dim,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=text_tokens,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    )
    scheduler = DPMSolverMultistepScheduler(
        num_train_timesteps=1000,
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        algorithm_type="dpmsolver++",
        solver_order=2,
        use_lu_lambdas=True,
        final_sigmas_type="zero",
    )
    return AnimationPipeline(
        unet=denoiser,
        vae=autoencoder,
        image_encoder=image_encoder,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
    )


def build_svd_pipeline(seed: int = 0) -> StableVideoDiffusionPipeline:
    """A tiny Stable Video Diffusion pipeline in the real checkpoint's format (as diffusers'
    own tests build one): image-only conditioning, an EDM-style Euler scheduler on v-prediction.
    """
    torch.manual_seed(seed)
    unet = _small_unet()
    vae = AutoencoderKLTemporalDecoder(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        block_out_channels=(32, 32),
        layers_per_block=1,
        latent_channels=4,
    )
    image_encoder = CLIPVisionModelWithProjection(
        CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=224,  # the SVD pipeline always resizes to CLIP's 224x224
            patch_size=32,
            projection_dim=CONTEXT_DIM,
        )
    )
    scheduler = EulerDiscreteScheduler(
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        interpolation_type="linear",
        num_train_timesteps=1000,
        prediction_type="v_prediction",
        sigma_max=700.0,
        sigma_min=0.002,
        steps_offset=1,
        timestep_spacing="leading",
        timestep_type="continuous",
        use_karras_sigmas=True,
    )
    return StableVideoDiffusionPipeline(
        vae=vae,
        image_encoder=image_encoder,
        unet=unet,
        scheduler=scheduler,
        feature_extractor=CLIPImageProcessor(crop_size=224, size=224),
    )


def init_model(directory: str | Path, seed: int = 0, svd: bool = False) -> Path:
    """Write a random-weight pipeline to ``directory`` in the ``from_pretrained`` layout:
    an ``AnimationPipeline``, or with ``svd`` a tiny ``StableVideoDiffusionPipeline``.
    """
    path = Path(directory)
    pipe = build_svd_pipeline(seed) if svd else build_pipeline(seed)
    pipe.save_pretrained(path, safe_serialization=True)
    return path
