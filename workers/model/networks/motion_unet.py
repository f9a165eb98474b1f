"""A small (2+1)D convolutional video denoiser that moves the input image with a predicted flow.

Called exactly like diffusers' ``UNetSpatioTemporalConditionModel`` so ``AnimationPipeline`` runs
it unchanged: ``unet(sample[B, F, 2C, H, W], timestep, encoder_hidden_states=[B, L, D],
added_time_ids=[B, 3]).sample`` where the second half of the channels is the image latent.

With ``guidance_embedding`` it is a guidance-distilled student: ``forward`` also takes the
guidance scales (B, 2: image, text), embedded like the timestep, and one pass predicts what the
teacher's three guided passes would.

It predicts the clean clip (pair it with a scheduler whose ``prediction_type`` is ``"sample"``)
as the first frame warped by a per-frame flow field plus a residual. Motion prompts describe
global warps, so a flow head learns them from a handful of numbers per frame, while a plain
convolutional decoder would have to copy every pixel through its receptive field. Coordinate
channels let convolutions tell the centre from the edges, which zoom and rotation need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from diffusers.utils import BaseOutput
from torch import nn


@dataclass
class MotionUNetOutput(BaseOutput):
    """``sample``: the predicted clean clip; ``flow``: (B, F, 2, H, W), where each pixel was
    sampled from in the first frame (normalised units), exposed for flow supervision."""

    sample: torch.Tensor
    flow: torch.Tensor | None = None


def timestep_features(timesteps: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features (B, dim) of diffusion timesteps in [0, 1000)."""
    half = dim // 2
    freqs = torch.arange(half, dtype=torch.float32, device=timesteps.device)
    freqs = torch.exp(-math.log(10_000) * freqs / half)
    args = timesteps.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=-1)


class ResBlock(nn.Module):
    """Spatial 3x3 conv, FiLM from the conditioning vector, temporal conv over 3 frames.

    Tensors are (B*F, C, H, W): 2D convolutions on that layout ran about 5x faster on CPU than
    ``Conv3d`` with a (1, 3, 3) kernel; the temporal conv runs on a (B, C, F, H*W) view.
    """

    def __init__(
        self, channels_in: int, channels: int, embed_dim: int, hidden: int | None = None
    ) -> None:
        super().__init__()
        # ``hidden``: the width inside the block (spatial conv to spatial2's input), by default
        # the output width; a slimmed model sets it per block.
        hidden = hidden or channels
        self.norm1 = nn.GroupNorm(8, channels_in)
        self.spatial = nn.Conv2d(channels_in, hidden, 3, padding=1)
        self.film = nn.Linear(embed_dim, 2 * hidden)
        self.norm2 = nn.GroupNorm(8, hidden)
        self.temporal = nn.Conv2d(hidden, hidden, (3, 1), padding=(1, 0))
        self.spatial2 = nn.Conv2d(hidden, channels, 3, padding=1)
        for weight in self.spatial2.parameters():  # each block starts as its skip path
            nn.init.zeros_(weight)
        self.skip: nn.Module = (
            nn.Conv2d(channels_in, channels, 1) if channels_in != channels else nn.Identity()
        )

    def forward(self, x: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        batch = embedding.shape[0]
        frames = x.shape[0] // batch
        h = self.spatial(F.silu(self.norm1(x)))
        film = self.film(embedding).repeat_interleave(frames, dim=0)[:, :, None, None]
        scale, shift = film.chunk(2, dim=1)
        h = F.silu(self.norm2(h) * (1 + scale) + shift)
        _, channels, height, width = h.shape
        by_time = h.view(batch, frames, channels, height * width).transpose(1, 2)
        mixed = F.silu(self.temporal(by_time.contiguous()))
        h = mixed.transpose(1, 2).reshape(batch * frames, channels, height, width)
        out: torch.Tensor = self.skip(x) + self.spatial2(h)
        return out


class MotionUNet(ModelMixin, ConfigMixin):
    """(2+1)D U-Net with FiLM prompt conditioning and a flow-warp output head."""

    @register_to_config  # type: ignore[untyped-decorator]
    def __init__(
        self,
        in_channels: int = 6,
        out_channels: int = 3,
        block_out_channels: tuple[int, ...] = (64, 96, 128),
        patch_size: int = 2,
        cross_attention_dim: int = 32,
        embed_dim: int = 128,
        frame_scale: float = 8.0,
        guidance_embedding: bool = False,
        inner_channels: tuple[int, ...] | None = None,
        up_block_out_channels: tuple[int, ...] | None = None,
    ) -> None:
        """``inner_channels`` (one per ResBlock: down blocks, mid, up blocks) and
        ``up_block_out_channels`` (one per up block, deepest first) give a slimmed model
        per-layer widths; unset, every width follows ``block_out_channels`` as before."""
        super().__init__()
        if in_channels != 2 * out_channels:
            raise ValueError(
                f"in_channels must be 2 * out_channels (noisy + image), got {in_channels}"
            )
        levels = len(block_out_channels)
        inner = list(inner_channels) if inner_channels else [None] * (2 * levels + 1)
        up_widths = list(up_block_out_channels or reversed(block_out_channels))
        if len(inner) != 2 * levels + 1 or len(up_widths) != levels:
            raise ValueError(
                f"{levels} levels need {2 * levels + 1} inner_channels and {levels} "
                f"up_block_out_channels, got {inner_channels} and {up_block_out_channels}"
            )
        # noisy, image, x, y, frame index: the three extra channels are built in forward.
        stem_in = (in_channels + 3) * patch_size**2
        widths = list(block_out_channels)
        self.stem = nn.Conv2d(stem_in, widths[0], 3, padding=1)
        self.time_mlp = nn.Sequential(
            nn.Linear(embed_dim, embed_dim), nn.SiLU(), nn.Linear(embed_dim, embed_dim)
        )
        self.text_mlp = nn.Sequential(
            nn.Linear(2 * cross_attention_dim, embed_dim),
            nn.SiLU(),
            nn.Linear(embed_dim, embed_dim),
        )
        self.guidance_mlp: nn.Sequential | None = None
        if guidance_embedding:
            # Fourier features of each scale (x1000, as the LCM scripts do), zero-initialised
            # output: a student made from a teacher starts as the teacher's image+text pass.
            self.guidance_mlp = nn.Sequential(
                nn.Linear(2 * embed_dim, embed_dim), nn.SiLU(), nn.Linear(embed_dim, embed_dim)
            )
            for weight in self.guidance_mlp[-1].parameters():
                nn.init.zeros_(weight)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        channels = widths[0]
        for level, width in enumerate(widths):
            self.down.append(ResBlock(channels, width, embed_dim, inner[level]))
            channels = width
            if level < len(widths) - 1:
                self.downsample.append(nn.Conv2d(channels, channels, 3, stride=2, padding=1))
        self.mid = ResBlock(channels, channels, embed_dim, inner[levels])
        self.up = nn.ModuleList()
        for index, (skip, width) in enumerate(zip(reversed(widths), up_widths, strict=True)):
            self.up.append(ResBlock(channels + skip, width, embed_dim, inner[levels + 1 + index]))
            channels = width
        # Global motion: a similarity transform per frame (shift x, y, log-scale, angle) from
        # the prompt, the frame's position in the clip and the pooled bottleneck features.
        self.motion_head = nn.Sequential(
            nn.Linear(widths[-1] + embed_dim + 2, embed_dim),
            nn.SiLU(),
            nn.Linear(embed_dim, embed_dim),
            nn.SiLU(),
            nn.Linear(embed_dim, 4),
        )
        for weight in self.motion_head[-1].parameters():
            nn.init.zeros_(weight)
        self.head_norm = nn.GroupNorm(8, channels)
        self.flow_head = nn.Conv2d(channels, 2, 3, padding=1)
        self.residual_head = nn.Conv2d(channels, out_channels * patch_size**2, 3, padding=1)
        # Zero heads: training starts from "copy the image into every frame".
        for weight in [*self.flow_head.parameters(), *self.residual_head.parameters()]:
            nn.init.zeros_(weight)

    @property
    def size_multiple(self) -> int:
        return int(self.config.patch_size * 2 ** (len(self.config.block_out_channels) - 1))

    def _conditioning(
        self, timesteps: torch.Tensor, context: torch.Tensor, guidance: torch.Tensor | None
    ) -> torch.Tensor:
        # Token 0 is the CLIP image token; the image itself arrives as the concatenated latent.
        text = context[:, 1:].to(self.dtype)
        pooled = torch.cat([text.mean(dim=1), text[:, -1]], dim=-1)
        features = timestep_features(timesteps, self.config.embed_dim).to(self.dtype)
        embedding = self.time_mlp(features) + self.text_mlp(pooled)
        if self.guidance_mlp is not None:
            if guidance is None:
                raise ValueError("a guidance-distilled MotionUNet needs guidance_scale (B, 2)")
            scales = guidance.float().reshape(-1, 2).expand(timesteps.shape[0], 2) * 1000
            dim = self.config.embed_dim
            fourier = torch.cat(
                [timestep_features(scales[:, 0], dim), timestep_features(scales[:, 1], dim)], -1
            )
            embedding = embedding + self.guidance_mlp(fourier.to(self.dtype))
        return F.silu(embedding)

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor | float | int,
        encoder_hidden_states: torch.Tensor,
        added_time_ids: torch.Tensor | None = None,
        return_dict: bool = True,
        guidance_scale: torch.Tensor | None = None,
    ) -> MotionUNetOutput | tuple[torch.Tensor]:
        """Predicted clean clip (B, F, C, H, W); ``added_time_ids`` is accepted and unused.

        ``guidance_scale`` (B, 2: image, text) is required by a guidance-distilled student and
        ignored by a teacher.
        """
        batch, frames, _, height, width = sample.shape
        if height % self.size_multiple or width % self.size_multiple:
            raise ValueError(
                f"height and width must be multiples of {self.size_multiple}, got {height}x{width}"
            )
        timesteps = torch.as_tensor(timestep, dtype=torch.float32).reshape(-1).expand(batch)
        embedding = self._conditioning(timesteps, encoder_hidden_states, guidance_scale)
        shallow, image = self.shallow_in(sample, embedding)
        deep, motion = self.deep(shallow, embedding, frames)
        out, flow = self.shallow_out(deep, shallow, embedding, image, motion, sample.shape)
        if not return_dict:
            return (out.to(sample.dtype),)
        return MotionUNetOutput(sample=out.to(sample.dtype), flow=flow)

    # The forward in three parts, so block caching (workers/model/runtime/block_cache.py) can reuse
    # the deep part's output between adjacent steps and recompute only the shallow ones.

    def shallow_in(
        self, sample: torch.Tensor, embedding: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first level's features (B*F, C0, H/p, W/p) and the fp32 image (B, C, H, W)."""
        # The network runs in the weights' dtype (bf16 in workers); the warp and the sum stay
        # fp32, so the copied pixels keep full precision.
        image = sample[:, 0, self.config.out_channels :].float()
        stem_in = self._stem_input(sample.to(self.dtype)).flatten(0, 1)
        h = self.stem(F.pixel_unshuffle(stem_in, self.config.patch_size))
        shallow: torch.Tensor = self.down[0](h, embedding)
        return shallow, image

    def deep(
        self, shallow: torch.Tensor, embedding: torch.Tensor, frames: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every level below the first: the input of the last up block (before the skip is
        concatenated) and the per-frame global motion."""
        h = shallow
        skips = [shallow]
        for level, block in enumerate(self.down):
            if level:
                h = block(h, embedding)
                skips.append(h)
            if level < len(self.downsample):
                h = self.downsample[level](h)
        h = self.mid(h, embedding)
        motion = self._global_motion(h, embedding, frames)
        for block in self.up[:-1]:
            skip = skips.pop()
            if h.shape[-1] != skip.shape[-1]:
                h = F.interpolate(h, size=skip.shape[-2:], mode="nearest")
            h = block(torch.cat([h, skip], dim=1), embedding)
        if h.shape[-1] != shallow.shape[-1]:
            h = F.interpolate(h, size=shallow.shape[-2:], mode="nearest")
        return h, motion

    def shallow_out(
        self,
        deep: torch.Tensor,
        shallow: torch.Tensor,
        embedding: torch.Tensor,
        image: torch.Tensor,
        motion: torch.Tensor,
        shape: torch.Size,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The last up block and the heads: the clean clip (B, F, C, H, W) and its flow."""
        batch, frames, _, height, width = shape
        h = self.up[-1](torch.cat([deep, shallow], dim=1), embedding)
        h = F.silu(self.head_norm(h))
        flow = F.interpolate(
            self.flow_head(h).float(), size=(height, width), mode="bilinear", align_corners=False
        ) + similarity_flow(motion, height, width)
        residual = F.pixel_shuffle(self.residual_head(h).float(), self.config.patch_size)
        out = (warp(image, flow, frames) + residual).view(batch, frames, -1, height, width)
        return out, flow.view(batch, frames, 2, height, width)

    def _global_motion(self, h: torch.Tensor, embedding: torch.Tensor, frames: int) -> torch.Tensor:
        """Per-frame similarity parameters (B*F, 4), zero at frame 0 by construction."""
        index = torch.arange(frames, dtype=h.dtype, device=h.device)
        position = torch.stack([index / self.config.frame_scale, index / max(frames - 1, 1)], -1)
        features = torch.cat(
            [
                h.mean(dim=(2, 3)),
                embedding.repeat_interleave(frames, dim=0),
                position.repeat(embedding.shape[0], 1),
            ],
            dim=-1,
        )
        # Scaled by the frame index: constant-speed motions become a constant output.
        motion: torch.Tensor = self.motion_head(features).float()
        return motion * position[:, :1].float().repeat(embedding.shape[0], 1)

    def _stem_input(self, sample: torch.Tensor) -> torch.Tensor:
        batch, frames, _, height, width = sample.shape
        shape = (batch, frames, 1, height, width)
        dtype, device = sample.dtype, sample.device
        ys = linspace(-1, 1, height, dtype, device).view(1, 1, 1, height, 1)
        xs = linspace(-1, 1, width, dtype, device).view(1, 1, 1, 1, width)
        steps = (torch.arange(frames, device=device) / self.config.frame_scale).to(dtype)
        extra = [xs.expand(shape), ys.expand(shape), steps.view(1, frames, 1, 1, 1).expand(shape)]
        return torch.cat([sample, *extra], dim=2)


def linspace(
    start: float,
    end: float,
    steps: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
) -> torch.Tensor:
    """``torch.linspace``; while exporting with a symbolic size (one package for every working
    size), the same points from ``arange``: export specialises ``linspace``'s step count to the
    example's. The two differ in the last bit of a few points."""
    if not torch.compiler.is_exporting():
        return torch.linspace(start, end, steps, dtype=dtype, device=device)
    index = torch.arange(steps, dtype=torch.float32, device=device)
    step = (end - start) / max(steps - 1, 1)
    return (start + index * step).to(dtype)


def pixel_centres(height: int, width: int, device: torch.device | None = None) -> torch.Tensor:
    """(H, W, 2) pixel-centre coordinates, x then y, in grid_sample's [-1, 1] units."""
    ys = linspace(-1 + 1 / height, 1 - 1 / height, height, device=device)
    xs = linspace(-1 + 1 / width, 1 - 1 / width, width, device=device)
    return torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)


def similarity_flow(motion: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Flow (N, 2, H, W) of per-frame similarity transforms (N, 4) = (tx, ty, log-scale, angle).

    A transform maps a first-frame point p to exp(z) R(a) p + t; the flow of output pixel q is
    its source exp(-z) R(-a) (q - t) minus q.
    """
    points = pixel_centres(height, width, motion.device).view(1, height, width, 2)
    shift = motion[:, None, None, :2]
    scale = torch.exp(-motion[:, 2]).view(-1, 1, 1)
    cos, sin = torch.cos(motion[:, 3]).view(-1, 1, 1), torch.sin(motion[:, 3]).view(-1, 1, 1)
    x, y = (points - shift).unbind(-1)
    source = torch.stack([cos * x + sin * y, -sin * x + cos * y], dim=1) * scale[:, None]
    return source - points.permute(0, 3, 1, 2)


def warp(image: torch.Tensor, flow: torch.Tensor, frames: int) -> torch.Tensor:
    """Sample each image (B, C, H, W) at pixel + flow (B*F, 2, H, W), flow in [-1, 1] units."""
    _, _, height, width = image.shape
    grid = pixel_centres(height, width, flow.device)[None] + flow.permute(0, 2, 3, 1)
    source = image.repeat_interleave(frames, dim=0)
    warped: torch.Tensor = F.grid_sample(
        source, grid, mode="bilinear", padding_mode="border", align_corners=False
    )
    return warped
