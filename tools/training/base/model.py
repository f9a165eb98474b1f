"""The shipped small model: a pixel-space :class:`MotionUNet` pipeline, built from config."""

from __future__ import annotations

from diffusers import DPMSolverMultistepScheduler

from workers.model.networks.motion_unet import MotionUNet
from workers.model.networks.pixel_codec import PixelCodec
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.build import CONTEXT_DIM, build_pipeline


def build_scheduler() -> DPMSolverMultistepScheduler:
    """Second-order DPM-Solver++ on log-SNR-spaced steps down to noise level zero, for a model
    that predicts the clean clip."""
    return DPMSolverMultistepScheduler(
        num_train_timesteps=1000,
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type="sample",
        algorithm_type="dpmsolver++",
        solver_order=2,
        use_lu_lambdas=True,
        final_sigmas_type="zero",
    )


def build_small_pipeline(
    seed: int = 0, block_out_channels: tuple[int, ...] = (32, 64, 96)
) -> AnimationPipeline:
    """Untrained weights of the small model; ``animfleet train`` trains U-Net and text encoder.

    The tokenizer, CLIP encoders and noise schedule are the project's small ones. The image
    reaches the U-Net as pixels, so the CLIP image encoder only fills the image-token slot,
    which MotionUNet ignores, and stays untrained.
    """

    def unet() -> MotionUNet:
        model: MotionUNet = MotionUNet(
            in_channels=6,
            out_channels=3,
            block_out_channels=block_out_channels,
            cross_attention_dim=CONTEXT_DIM,
        )
        return model

    pipe = build_pipeline(seed, unet=unet, vae=PixelCodec)
    pipe.scheduler = build_scheduler()
    return pipe
