"""DeepCache-style block caching for :class:`MotionUNet`: reuse the deep features between steps.

Adjacent denoising steps change the U-Net's deep, low-resolution features little, while the
first level (full resolution after the patchify) carries the detail. Every ``interval``-th step
runs the whole U-Net and keeps the deep part's output (the last up block's input) and the global
motion; the steps between run only the first level and the last up block, reusing them.

Installed as the U-Net's ``forward`` (like the AOT packages), so the pipeline is unchanged. A
video starts when the timestep stops decreasing (the schedulers count down) or the shape
changes: its first step always runs the whole U-Net.
"""

from __future__ import annotations

from typing import Any

import torch

from workers.model.networks.motion_unet import MotionUNet, MotionUNetOutput


class BlockCache:
    """Caching forward for one ``MotionUNet``; ``interval`` 2 runs the deep part every other
    step."""

    def __init__(self, unet: MotionUNet, interval: int) -> None:
        if interval < 2:
            raise ValueError(f"a block-cache interval below 2 caches nothing, got {interval}")
        self.unet = unet
        self.interval = interval
        self.full_calls = 0
        self.cached_calls = 0
        self._step = 0
        self._last_t = float("inf")
        self._cached: tuple[torch.Size, torch.Tensor, torch.Tensor] | None = None
        unet.forward = self._forward  # type: ignore[method-assign]

    def remove(self) -> None:
        self.unet.__dict__.pop("forward", None)

    def _forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor | float | int,
        encoder_hidden_states: torch.Tensor,
        added_time_ids: torch.Tensor | None = None,
        return_dict: bool = True,
        guidance_scale: torch.Tensor | None = None,
    ) -> Any:
        unet = self.unet
        t = float(torch.as_tensor(timestep).reshape(-1)[0])
        if t >= self._last_t or self._cached is None or self._cached[0] != sample.shape:
            self._step = 0  # a new video
        self._last_t = t
        batch, frames = sample.shape[:2]
        timesteps = torch.as_tensor(timestep, dtype=torch.float32).reshape(-1).expand(batch)
        embedding = unet._conditioning(timesteps, encoder_hidden_states, guidance_scale)
        shallow, image = unet.shallow_in(sample, embedding)
        if self._step % self.interval == 0 or self._cached is None:
            deep, motion = unet.deep(shallow, embedding, frames)
            self._cached = (sample.shape, deep, motion)
            self.full_calls += 1
        else:
            _, deep, motion = self._cached
            self.cached_calls += 1
        self._step += 1
        out, flow = unet.shallow_out(deep, shallow, embedding, image, motion, sample.shape)
        if not return_dict:
            return (out.to(sample.dtype),)
        return MotionUNetOutput(sample=out.to(sample.dtype), flow=flow)


def install_block_cache(unet: Any, interval: int) -> BlockCache | None:
    """A :class:`BlockCache` on ``unet`` when it is a ``MotionUNet`` and ``interval`` >= 2."""
    if interval < 2 or not isinstance(unet, MotionUNet):
        return None
    return BlockCache(unet, interval)
