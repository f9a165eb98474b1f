"""The identity "VAE" of pixel-space models: latents are the RGB pixels in [-1, 1].

At 32-64 pixel sides a learned autoencoder would cost more compute than it saves and blur the
frames; this keeps ``AnimationPipeline``'s ``vae.encode(...).latent_dist.mode()`` and
``vae.decode(latents, num_frames=...).sample`` contract, with a downsampling factor of 1
(``block_out_channels`` has one entry, which ``AnimationPipeline.size_multiple`` reads).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from diffusers.utils import BaseOutput


@dataclass
class PixelLatents:
    """Stands in for a latent distribution: ``mode()`` and ``sample()`` are the pixels."""

    pixels: torch.Tensor

    def mode(self) -> torch.Tensor:
        return self.pixels

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.pixels


@dataclass
class PixelEncoderOutput(BaseOutput):
    latent_dist: PixelLatents


@dataclass
class PixelDecoderOutput(BaseOutput):
    sample: torch.Tensor


class PixelCodec(ModelMixin, ConfigMixin):
    """Encode and decode are the identity; the model has no weights."""

    @register_to_config  # type: ignore[untyped-decorator]
    def __init__(
        self,
        in_channels: int = 3,
        latent_channels: int = 3,
        block_out_channels: tuple[int, ...] = (3,),
        scaling_factor: float = 1.0,
    ) -> None:
        super().__init__()
        if latent_channels != in_channels or len(block_out_channels) != 1:
            raise ValueError(
                "a pixel codec keeps channels and size: latent_channels must equal in_channels "
                f"({latent_channels} != {in_channels}) and block_out_channels have one entry"
            )
        # ModelMixin reads the dtype and device from a parameter or buffer; this is that buffer.
        self.register_buffer("anchor", torch.zeros(1), persistent=True)
        self.anchor: torch.Tensor

    def encode(self, pixels: torch.Tensor, return_dict: bool = True) -> PixelEncoderOutput:
        return PixelEncoderOutput(latent_dist=PixelLatents(pixels))

    def decode(
        self, latents: torch.Tensor, num_frames: int | None = None, return_dict: bool = True
    ) -> PixelDecoderOutput:
        return PixelDecoderOutput(sample=latents)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels
