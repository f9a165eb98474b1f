"""Image + text to video: an SVD-style latent video diffusion pipeline from diffusers parts.

Guidance combines three U-Net passes per step (InstructPix2Pix-style):
``eps = eps_u + s_img * (eps_img - eps_u) + s_txt * (eps_img_txt - eps_img)``
where "u" has neither image nor text, "img" has the image only, "img_txt" has both. A
guidance-distilled student (``unet.config.guidance_embedding``) takes the two scales as input
and makes one pass per step instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from diffusers import (
    AutoencoderKLTemporalDecoder,
    DiffusionPipeline,
    SchedulerMixin,
    UNetSpatioTemporalConditionModel,
)
from transformers import CLIPTextModel, CLIPVisionModelWithProjection, PreTrainedTokenizerBase

from workers.model.pipelines.generation import GenerationParams

StepCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class Conditions:
    """U-Net inputs besides the noisy latents, pass-major: rows ``[p * B:(p + 1) * B]`` are pass
    ``p`` (for a teacher: unconditional, image only, image + text)."""

    context: torch.Tensor  # (P*B, L, D) encoder hidden states
    latents: torch.Tensor  # (P*B, F, C, h, w) image latents, concatenated to the noisy ones
    time_ids: torch.Tensor  # (P*B, 3)
    passes: int


CLIP_MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
CLIP_STD = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)


def pixels_of(image: npt.NDArray[np.uint8], device: torch.device | str) -> torch.Tensor:
    """An RGB frame (H, W, 3 uint8) as the pipeline's input batch (1, 3, H, W in [-1, 1])."""
    return torch.from_numpy(image).permute(2, 0, 1)[None].to(device).float() / 127.5 - 1.0


def check_size(image: npt.NDArray[np.uint8], multiple: int) -> None:
    """Raise ValueError unless the image's sides divide by ``multiple``."""
    height, width = image.shape[:2]
    if height % multiple or width % multiple:
        raise ValueError(f"height and width must be multiples of {multiple}, got {height}x{width}")


class AnimationPipeline(DiffusionPipeline):
    """Animate one still image as prompted; loads with ``AnimationPipeline.from_pretrained``."""

    model_cpu_offload_seq = "image_encoder->text_encoder->unet->vae"

    def __init__(
        self,
        unet: UNetSpatioTemporalConditionModel,
        vae: AutoencoderKLTemporalDecoder,
        image_encoder: CLIPVisionModelWithProjection,
        text_encoder: CLIPTextModel,
        tokenizer: PreTrainedTokenizerBase,
        scheduler: SchedulerMixin,
    ) -> None:
        super().__init__()
        self.register_modules(
            unet=unet,
            vae=vae,
            image_encoder=image_encoder,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            scheduler=scheduler,
        )

    @property
    def size_multiple(self) -> int:
        """Frame sides must divide by this: the VAE's and the U-Net's downsampling combined."""
        vae_levels = len(self.vae.config.block_out_channels) - 1
        unet_levels = len(self.unet.config.block_out_channels) - 1
        return int(2 ** (vae_levels + unet_levels))

    def _encode_text(self, prompts: list[str]) -> torch.Tensor:
        tokens = self.tokenizer(
            prompts,
            padding="max_length",
            max_length=self.tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        )
        ids = tokens.input_ids.to(self.text_encoder.device)
        hidden: torch.Tensor = self.text_encoder(ids).last_hidden_state
        return hidden

    def _encode_image_embedding(self, pixels: torch.Tensor) -> torch.Tensor:
        size = self.image_encoder.config.image_size
        clip_in = F.interpolate((pixels + 1) / 2, size=(size, size), mode="bilinear")
        mean, std = CLIP_MEAN.to(pixels.device), CLIP_STD.to(pixels.device)
        clip_in = ((clip_in - mean) / std).to(self.image_encoder.dtype)
        embeds: torch.Tensor = self.image_encoder(clip_in).image_embeds
        return embeds.unsqueeze(1)  # one image token

    @property
    def guidance_distilled(self) -> bool:
        """A student that takes the guidance scales as input and needs one pass per step."""
        return bool(getattr(self.unet.config, "guidance_embedding", False))

    @property
    def passes_per_step(self) -> int:
        return 1 if self.guidance_distilled else 3

    def image_features(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the conditioning takes from the images (B, 3, H, W in [-1, 1]) alone: their
        latents and CLIP image tokens. Prompt-free, so a worker caches them per image."""
        latent = self.vae.encode(pixels.to(self.vae.dtype)).latent_dist.mode()
        return latent, self._encode_image_embedding(pixels)

    def condition(
        self,
        pixels: torch.Tensor,
        prompts: list[str],
        num_frames: int,
        fps: int,
        features: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> Conditions:
        """The U-Net's conditioning for a batch of images (B, 3, H, W in [-1, 1]) and prompts;
        ``features``: their :meth:`image_features` computed before (e.g. cached).

        A teacher gets three passes per sample (unconditional, image only, image + text), a
        student only the image + text pass.
        """
        dtype = self.unet.dtype
        batch = pixels.shape[0]
        image_latent, image_token = features or self.image_features(pixels)
        if self.guidance_distilled:
            contexts = [torch.cat([image_token, self._encode_text(prompts)], dim=1)]
            latents = [image_latent]
        else:
            text = self._encode_text([*prompts, ""])
            text_tokens, null_tokens = text[:batch], text[batch:].expand(batch, -1, -1)
            contexts = [
                torch.cat([torch.zeros_like(image_token), null_tokens], dim=1),
                torch.cat([image_token, null_tokens], dim=1),
                torch.cat([image_token, text_tokens], dim=1),
            ]
            latents = [torch.zeros_like(image_latent), image_latent, image_latent]
        passes = len(contexts)
        cond_latents = torch.cat(latents).unsqueeze(1).repeat(1, num_frames, 1, 1, 1)
        return Conditions(
            context=torch.cat(contexts).to(dtype),
            latents=cond_latents.to(dtype),
            time_ids=torch.tensor(
                [[fps - 1, 127.0, 0.0]], dtype=dtype, device=pixels.device
            ).repeat(passes * batch, 1),
            passes=passes,
        )

    def denoise(
        self,
        noise: torch.Tensor,
        conditions: Conditions,
        guidance: torch.Tensor,
        num_inference_steps: int,
        on_step: StepCallback | None = None,
    ) -> torch.Tensor:
        """Clean latents (B, F, C, h, w) from ``noise``; ``guidance`` is (B, 2): image, text."""
        dtype = self.unet.dtype
        scales = guidance.float().view(-1, 2, 1, 1, 1, 1)
        extra = {"guidance_scale": guidance.to(dtype)} if self.guidance_distilled else {}
        self.scheduler.set_timesteps(num_inference_steps, device=noise.device)
        latents = noise.float() * self.scheduler.init_noise_sigma
        timesteps = self.scheduler.timesteps
        for index, t in enumerate(timesteps):
            model_in = self.scheduler.scale_model_input(latents, t).repeat(
                conditions.passes, 1, 1, 1, 1
            )
            model_in = torch.cat([model_in.to(dtype), conditions.latents], dim=2)
            out = self.unet(
                model_in,
                t,
                encoder_hidden_states=conditions.context,
                added_time_ids=conditions.time_ids,
                **extra,
            ).sample.float()
            if conditions.passes == 3:
                eps_u, eps_img, eps_full = out.chunk(3)
                out = eps_u + scales[:, 0] * (eps_img - eps_u) + scales[:, 1] * (eps_full - eps_img)
            latents = self.scheduler.step(out, t, latents).prev_sample
            if on_step is not None:
                on_step(index + 1, len(timesteps))
        clean: torch.Tensor = latents
        return clean

    @torch.inference_mode()
    def __call__(
        self,
        image: npt.NDArray[np.uint8],
        params: GenerationParams,
        on_step: StepCallback | None = None,
        features: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> npt.NDArray[np.uint8]:
        """Return ``params.num_frames`` RGB frames (T, H, W, 3 uint8) at the input image's
        size; ``features``: the image's :meth:`image_features`, when computed before."""
        latents, _ = self.generate(image, params, on_step, features)
        return self.decode(latents, first_frame=image)

    def generate(
        self,
        image: npt.NDArray[np.uint8],
        params: GenerationParams,
        on_step: StepCallback | None = None,
        features: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, Conditions]:
        """The clean latents (1, F, C, h, w) of :meth:`__call__` before decoding, and the
        conditioning they were denoised with (the full-resolution renderer reads both)."""
        noise, conditions, guidance = self.prepare(image, params, features)
        latents = self.denoise(noise, conditions, guidance, params.num_inference_steps, on_step)
        return latents, conditions

    def prepare(
        self,
        image: npt.NDArray[np.uint8],
        params: GenerationParams,
        features: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, Conditions, torch.Tensor]:
        """What the denoising loop starts from: the noise (1, F, C, h, w), the conditioning
        and the guidance scales (1, 2). Raises ValueError for an image of the wrong size."""
        check_size(image, self.size_multiple)
        device = self.unet.device
        pixels = pixels_of(image, device)
        frames = params.num_frames
        conditions = self.condition(pixels, [params.prompt], frames, params.fps, features)
        generator = torch.Generator().manual_seed(params.seed)
        latent_shape = (1, frames, self.unet.config.out_channels, *conditions.latents.shape[-2:])
        # Drawn on the CPU: a seed gives the same noise on every device.
        noise = torch.randn(latent_shape, generator=generator).to(device)
        return noise, conditions, params.guidance(device)

    def decode(
        self, latents: torch.Tensor, first_frame: npt.NDArray[np.uint8] | None = None
    ) -> npt.NDArray[np.uint8]:
        """Frames (T, H, W, 3 uint8) of clean latents; with ``first_frame`` (the input image),
        frame 0 is that image exactly. The model warps frame 0 by a zero global motion, but
        its local flow and residual blur what little there is in a dark, sparse picture (a
        star field: tests/workers/model/pipelines/test_first_frame.py fails without the pin)."""
        # NaN would become black frames in the uint8 cast below: fail the job instead.
        if not bool(torch.isfinite(latents).all()):
            raise ValueError("the denoiser produced non-finite latents (NaN or inf)")
        num_frames = latents.shape[1]
        flat = latents.flatten(0, 1).to(self.vae.dtype) / self.vae.config.scaling_factor
        frames: torch.Tensor = self.vae.decode(flat, num_frames=num_frames).sample
        out = ((frames.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        result: npt.NDArray[np.uint8] = out.permute(0, 2, 3, 1).cpu().numpy()
        if first_frame is not None:
            result[0] = first_frame
        return result


def describe(pipe: AnimationPipeline) -> dict[str, Any]:
    """Sizes worth logging when a worker loads a model."""
    return {
        "unet_params": sum(p.numel() for p in pipe.unet.parameters()),
        "vae_params": sum(p.numel() for p in pipe.vae.parameters()),
        "dtype": str(pipe.unet.dtype),
    }
