"""An image-conditioned add-on: a small ControlNet-style branch beside the served U-Net.

The branch reads one control image (a motion path drawn light on dark over the frame) and
produces two residuals through zero-initialised output layers, as ControlNet does: one added
to the U-Net's bottleneck features (the ``mid`` block's output, every frame) and one added to
the first hidden layer of its motion head, which turns the bottleneck into each frame's
global motion. The base weights are never touched: the residuals are added by forward hooks
that return nothing while no control is active, so a job without the add-on is
bit-identical to the base model.

The residuals depend on the control image alone, not on the timestep or the noisy clip, so
they are computed once per job, not once per denoising step, and can run beside the start of
the job (conditioning and the U-Net's first blocks, see :mod:`workers.model.addons.control_run`).
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps
from safetensors import safe_open
from torch import nn

WEIGHTS_FILE = "addon.safetensors"
# The control image is read at this size (square), whatever the job's size.
CONTROL_SIZE = 64


class ControlEncoder(nn.Module):
    """Control image (B, 1, S, S) in [0, 1] -> (bottleneck residual, motion-head residual).

    Four 3x3 convolutions (three of stride 2) over the image and its x, y coordinates, then
    zero-initialised outputs: a 1x1 conv to the bottleneck's width, and a small MLP to the
    motion head's hidden width over the features' spatial moments (their mean, and their
    means weighted by x and by y: where along the frame each feature fires, so a path's
    direction and length are linear in them). Zero outputs mean a fresh branch changes
    nothing; training moves them.
    """

    def __init__(self, bottleneck: int, hidden: int, width: int = 16) -> None:
        super().__init__()
        widths = (width, 2 * width, 4 * width, 4 * width)
        layers: list[nn.Module] = []
        channels = 3
        for index, out in enumerate(widths):
            layers += [nn.Conv2d(channels, out, 3, stride=1 if index == 0 else 2, padding=1)]
            layers += [nn.SiLU()]
            channels = out
        self.features = nn.Sequential(*layers)
        self.zero_mid = nn.Conv2d(channels, bottleneck, 1)
        self.pooled = nn.Sequential(
            nn.LayerNorm(3 * channels), nn.Linear(3 * channels, hidden), nn.SiLU()
        )
        self.zero_motion = nn.Linear(hidden, hidden)
        for weight in [*self.zero_mid.parameters(), *self.zero_motion.parameters()]:
            nn.init.zeros_(weight)

    def forward(self, control: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, pooled = self.encode(control)
        return self.zero_mid(h), self.zero_motion(pooled)

    def encode(self, control: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The features before the zero outputs: the map (B, C, S/8, S/8) and the pooled
        vector (B, hidden)."""
        batch, _, height, width = control.shape
        ys = torch.linspace(-1, 1, height, dtype=control.dtype, device=control.device)
        xs = torch.linspace(-1, 1, width, dtype=control.dtype, device=control.device)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        coords = torch.stack([grid_x, grid_y])[None].expand(batch, 2, height, width)
        h = self.features(torch.cat([control, coords], dim=1))
        at = F.adaptive_avg_pool2d(coords, h.shape[-2:])[:, :, None]  # (B, 2, 1, h, w)
        moments = [h.mean(dim=(2, 3)), *(h[:, None] * at).mean(dim=(3, 4)).unbind(1)]
        return h, self.pooled(torch.cat(moments, dim=1))


@dataclass(frozen=True)
class Residuals:
    """One job's control residuals: ``mid`` (B, C, h, w) and ``motion`` (B, hidden)."""

    mid: torch.Tensor
    motion: torch.Tensor


class Pending(Protocol):
    """Residuals being computed (maybe on another thread or stream); ``wait`` returns them."""

    def wait(self) -> Residuals: ...


@dataclass(frozen=True)
class Ready:
    """Residuals computed already (the serial path, and training)."""

    residuals: Residuals

    def wait(self) -> Residuals:
        return self.residuals


def control_pixels(data: bytes, width: int, height: int) -> torch.Tensor:
    """A control image's bytes as the branch reads them: (1, 1, S, S) luminance in [0, 1].

    Fitted to the job's aspect ratio like the input image (centre crop), so the drawing lies
    over the frame where it was drawn; a dark-on-light drawing is inverted to light on dark.
    """
    with Image.open(io.BytesIO(data)) as opened:
        image = ImageOps.exif_transpose(opened).convert("L")
    fitted = ImageOps.fit(image, (width, height), Image.Resampling.BICUBIC)
    square = fitted.resize((CONTROL_SIZE, CONTROL_SIZE), Image.Resampling.BOX)
    pixels = torch.from_numpy(np.asarray(square, dtype=np.float32) / 255.0)
    if float(pixels.mean()) > 0.5:
        pixels = 1.0 - pixels
    return pixels[None, None]


class ControlHooks:
    """Forward hooks on a MotionUNet's ``mid`` block and ``motion_head[0]`` that add the
    active job's residuals (the sum over its control add-ons, each times its scale); with
    none active they return nothing.

    The first hook call of a job waits for the pending residuals, so whatever runs before
    the U-Net's bottleneck overlaps their computation.
    """

    def __init__(self, unet: nn.Module) -> None:
        self.unet = unet
        self._pending: tuple[tuple[Pending, float], ...] = ()
        self._residuals: Residuals | None = None
        self._lock = threading.Lock()
        mid = unet.get_submodule("mid")
        head = unet.get_submodule("motion_head.0")
        self.handles = [
            mid.register_forward_hook(self._add_mid),
            head.register_forward_hook(self._add_motion),
        ]

    @contextlib.contextmanager
    def activate(self, pending: Sequence[tuple[Pending, float]]) -> Iterator[None]:
        """Run the U-Net with these residuals, each times its scale, inside the block; each
        is waited for on first use. Empty: the base model."""
        if not pending:
            yield
            return
        with self._lock:
            self._pending, self._residuals = tuple(pending), None
            try:
                yield
            finally:
                self._pending, self._residuals = (), None

    def _ready(self) -> Residuals | None:
        if self._residuals is None and self._pending:
            ready = [(p.wait(), scale) for p, scale in self._pending]
            self._residuals = Residuals(
                sum(scale * r.mid for r, scale in ready),  # type: ignore[arg-type]
                sum(scale * r.motion for r, scale in ready),  # type: ignore[arg-type]
            )
        return self._residuals

    def _add_mid(self, module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> Any:
        residuals = self._ready()
        if residuals is None:
            return None  # the base output, untouched
        mid = residuals.mid
        if mid.shape[-2:] != output.shape[-2:]:
            mid = F.adaptive_avg_pool2d(mid, (output.shape[-2], output.shape[-1]))
        mid = mid.repeat_interleave(output.shape[0] // mid.shape[0], dim=0)
        return output + mid.to(output.dtype)

    def _add_motion(self, module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> Any:
        residuals = self._ready()
        if residuals is None:
            return None
        motion = residuals.motion
        motion = motion.repeat_interleave(output.shape[0] // motion.shape[0], dim=0)
        return output + motion.to(output.dtype)

    def remove(self) -> None:
        """Take the hooks off (the U-Net is exactly the base model again)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def encoder_for(unet: nn.Module, width: int = 16) -> ControlEncoder:
    """A fresh branch sized for ``unet`` (a MotionUNet): its bottleneck and head widths."""
    config: Any = getattr(unet, "config")  # noqa: B009 (a diffusers config, untyped)
    return ControlEncoder(int(config.block_out_channels[-1]), int(config.embed_dim), width)


class ControlAddonError(ValueError):
    """A control add-on's file is missing, malformed or made for another model."""


def read_control(
    path: Path, name: str, base: str, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> ControlEncoder:
    """The branch in ``<path>/addon.safetensors`` (metadata ``kind: control``), in eval mode;
    raises :class:`ControlAddonError` if it is missing, malformed or for another model."""
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise ControlAddonError(f"add-on {name!r} has no {WEIGHTS_FILE} in {path}")
    with safe_open(str(weights), framework="pt") as handle:
        meta = handle.metadata() or {}
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    if meta.get("kind") != "control":
        raise ControlAddonError(f"add-on {name!r} is not a control add-on")
    if meta.get("base") != base:
        raise ControlAddonError(f"add-on {name!r} is for {meta.get('base')!r}, not {base!r}")
    try:
        bottleneck, hidden = (
            tensors["zero_mid.weight"].shape[0],
            tensors["zero_motion.weight"].shape[0],
        )
        encoder = ControlEncoder(bottleneck, hidden, tensors["features.0.weight"].shape[0])
        encoder.load_state_dict(tensors)
    except (KeyError, RuntimeError) as error:
        raise ControlAddonError(
            f"add-on {name!r} is not a valid control branch: {error}"
        ) from error
    encoder.requires_grad_(False)
    return encoder.to(device, dtype).eval()
