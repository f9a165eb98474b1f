"""A small convolutional network that fills what comes into view when the camera moves.

Where a pan, zoom-out or rotation brings content into the frame that the input image does not
have (the warp's source falls outside the image), a warp can only replicate the border pixels,
which smears them into streaks. :class:`EdgeFill` sees the frame at the working resolution with
those pixels masked out and predicts them from what is still visible; the renderer
(:mod:`workers.model.pipelines.render`) upsamples its prediction for the masked region only.

It loads and saves like every model here (``EdgeFill.from_pretrained(directory)``, safetensors
weights beside a ``config.json``); ``tools/training/fill/train.py`` trains it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn


class _Block(nn.Module):
    """Two 3x3 convolutions with a residual connection; ``dilation`` widens the context."""

    def __init__(self, channels: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.conv2(F.gelu(self.conv1(F.gelu(x))))
        return out


class EdgeFill(ModelMixin, ConfigMixin):
    """Masked frame in, filled frame out; see the module docstring.

    Three levels (full, 1/2, 1/4 of the working size) with dilated blocks at the coarsest, so a
    pixel deep inside a strip that came into view still sees the visible content it continues.
    """

    @register_to_config  # type: ignore[untyped-decorator]
    def __init__(self, channels: int = 16, dilations: tuple[int, ...] = (2, 4, 8)) -> None:
        super().__init__()
        width = channels
        # RGB, the mask of unknown pixels, and x/y coordinates: the edges matter.
        self.stem = nn.Conv2d(6, width, 3, padding=1)
        self.enc1 = _Block(width)
        self.down1 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.enc2 = _Block(2 * width)
        self.down2 = nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1)
        self.mid = nn.ModuleList([_Block(4 * width, d) for d in dilations])
        self.up2 = nn.Conv2d(4 * width + 2 * width, 2 * width, 3, padding=1)
        self.dec2 = _Block(2 * width)
        self.up1 = nn.Conv2d(2 * width + width, width, 3, padding=1)
        self.dec1 = _Block(width)
        self.head = nn.Conv2d(width, 3, 3, padding=1)
        for weight in self.head.parameters():
            nn.init.zeros_(weight)

    @property
    def size_multiple(self) -> int:
        return 4

    def forward(self, frames: torch.Tensor, unknown: torch.Tensor) -> torch.Tensor:
        """``frames`` (N, 3, H, W) in [-1, 1], the unknown pixels as a warp left them (border
        replication), ``unknown`` (N, 1, H, W), 1 where the pixel is to be filled. Returns
        (N, 3, H, W): the known pixels as given, the unknown ones predicted."""
        batch, _, height, width = frames.shape
        known = 1 - unknown
        ys = torch.linspace(-1, 1, height, device=frames.device, dtype=frames.dtype)
        xs = torch.linspace(-1, 1, width, device=frames.device, dtype=frames.dtype)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        coords = torch.stack([grid_x, grid_y])[None].expand(batch, 2, height, width)
        h1 = self.enc1(self.stem(torch.cat([frames, unknown, coords], dim=1)))
        h2 = self.enc2(self.down1(F.gelu(h1)))
        h = self.down2(F.gelu(h2))
        for block in self.mid:
            h = block(h)
        h = F.interpolate(h, size=h2.shape[-2:], mode="nearest")
        h = self.dec2(self.up2(torch.cat([F.gelu(h), h2], dim=1)))
        h = F.interpolate(h, size=h1.shape[-2:], mode="nearest")
        h = self.dec1(self.up1(torch.cat([F.gelu(h), h1], dim=1)))
        # A correction of what is there: a warp's border replication at first (zero head).
        predicted = (frames + self.head(F.gelu(h))).clamp(-1, 1)
        out: torch.Tensor = frames * known + predicted * unknown
        return out
