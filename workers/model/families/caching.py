"""Step caching on a family's denoiser through diffusers' own hooks, and counting what it skips.

Four caches are considered: first-block cache (skip the remaining blocks when the first
block's residual barely changed since the last step), MagCache (skip while the accumulated
magnitude-ratio error stays small; its ratios are calibrated on this checkpoint by one full
run first, as they are checkpoint-dependent), TaylorSeer (predict the attention and
feed-forward outputs from a Taylor expansion between full steps) and pyramid attention
broadcast (reuse attention outputs inside a timestep range). Each one trades exactness for
work; whether its frames are good enough is the profile's PSNR check, not this module's.

:class:`CallCounter` counts the denoiser's calls and the ``nn.Linear`` calls inside its
repeated blocks: a cache that skips a block (or an attention) skips those layers' calls, so
the ratio to an uncached run is the work a cache actually saved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

Cache = Literal["none", "first_block", "mag", "taylorseer", "pyramid"]
CACHES: tuple[Cache, ...] = ("first_block", "mag", "taylorseer", "pyramid")

# Thresholds are the published defaults' order of magnitude; the PSNR floor decides.
FIRST_BLOCK_THRESHOLD = 0.1
MAG_THRESHOLD = 0.06
TAYLORSEER_INTERVAL = 3
PYRAMID_SKIP_RANGE = 2
TAYLORSEER_ATTENTION = r"^[^.]*blocks\.\d+\.attn\d*$"


def diffusers_pipe(pipe: Any) -> Any:
    """The diffusers pipeline itself: ``pipe``, or the one a family adapter holds (``.pipe``)."""
    return getattr(pipe, "pipe", pipe)


def denoiser(pipe: Any) -> nn.Module:
    """The pipeline's denoiser: its ``transformer`` (DiT families) or ``unet`` (SVD)."""
    pipe = diffusers_pipe(pipe)
    module = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    if not isinstance(module, nn.Module):
        raise ValueError(f"{type(pipe).__name__} has neither a transformer nor a unet")
    return module


def repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The denoiser's repeated blocks: the members of its top-level ``ModuleList`` children
    (``transformer_blocks``, ``blocks``, ``single_transformer_blocks``...), in order."""
    blocks: list[nn.Module] = []
    for child in module.children():
        if isinstance(child, nn.ModuleList):
            blocks.extend(child)
    return blocks


def supports_cache(pipe: Any) -> str | None:
    """None when diffusers' step caches apply to this pipeline's denoiser, else why not."""
    module = denoiser(pipe)
    if not callable(getattr(module, "enable_cache", None)):
        return f"{type(module).__name__} has no diffusers cache hooks (not a CacheMixin)"
    if getattr(diffusers_pipe(pipe), "transformer_2", None) is not None:
        # Wan 2.2's second expert takes the low-noise steps: hooks on the first cover only part.
        return "two experts share the steps: a cache on one would act on part of them only"
    if len(repeated_blocks(module)) < 2:
        return f"{type(module).__name__} has fewer than two repeated blocks to cache"
    return None


@dataclass
class CallCounter:
    """Forward hooks counting denoiser calls and block ``Linear`` calls (the work done)."""

    module: nn.Module
    denoiser_calls: int = 0
    block_linear_calls: int = 0
    _handles: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._handles.append(self.module.register_forward_hook(self._count_denoiser))
        for block in repeated_blocks(self.module):
            for layer in block.modules():
                if isinstance(layer, nn.Linear):
                    self._handles.append(layer.register_forward_hook(self._count_linear))

    def _count_denoiser(self, *_: Any) -> None:
        self.denoiser_calls += 1

    def _count_linear(self, *_: Any) -> None:
        self.block_linear_calls += 1

    def reset(self) -> None:
        self.denoiser_calls = self.block_linear_calls = 0

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def calibrate_mag_ratios(pipe: Any, steps: int, render: Callable[[Any], Any]) -> list[float]:
    """MagCache's magnitude ratios for this checkpoint: one full (nothing skipped) run of
    ``render(pipe)`` with MagCache in calibration mode, its per-step ratios captured from the
    tail block's hook (diffusers only prints them). The hook is removed after."""
    from diffusers.hooks import HookRegistry, MagCacheConfig
    from diffusers.hooks.mag_cache import _MAG_CACHE_BLOCK_HOOK

    module = denoiser(pipe)
    module.enable_cache(MagCacheConfig(calibrate=True, num_inference_steps=steps))  # type: ignore[operator]
    captured: dict[int, list[float]] = {}
    try:
        tail = repeated_blocks(module)[-1]
        hook = HookRegistry.check_if_exists_or_initialize(tail).get_hook(_MAG_CACHE_BLOCK_HOOK)
        record = hook._perform_calibration_step

        def capturing(state: Any, residual: torch.Tensor) -> None:
            record(state, residual)
            captured.setdefault(id(state), []).append(float(state.calibration_ratios[-1]))

        hook._perform_calibration_step = capturing
        render(pipe)
    finally:
        module.disable_cache()  # type: ignore[operator]
    if not captured:
        raise ValueError("MagCache calibration saw no denoising step")
    # One state per cache context (cond, uncond); the first one's ratios, one per step.
    return next(iter(captured.values()))[:steps]


def enable_cache(pipe: Any, cache: Cache, steps: int, mag_ratios: list[float] | None) -> None:
    """Install ``cache`` on the pipeline's denoiser; raises ValueError when it cannot apply."""
    if cache == "none":
        return
    reason = supports_cache(pipe)
    if reason is not None:
        raise ValueError(reason)
    from diffusers.hooks import (
        FirstBlockCacheConfig,
        MagCacheConfig,
        PyramidAttentionBroadcastConfig,
        TaylorSeerCacheConfig,
    )

    config: Any
    if cache == "first_block":
        config = FirstBlockCacheConfig(threshold=FIRST_BLOCK_THRESHOLD)
    elif cache == "mag":
        if not mag_ratios:
            raise ValueError("MagCache needs this checkpoint's calibrated ratios")
        config = MagCacheConfig(
            threshold=MAG_THRESHOLD, num_inference_steps=steps, mag_ratios=mag_ratios
        )
    elif cache == "taylorseer":
        config = TaylorSeerCacheConfig(
            cache_interval=TAYLORSEER_INTERVAL,
            disable_cache_before_step=1,
            taylor_factors_dtype=torch.float32,
            # diffusers' default patterns end in "attn" and miss attn1/attn2 (LTX, Wan...).
            cache_identifiers=[TAYLORSEER_ATTENTION],
        )
    else:
        config = PyramidAttentionBroadcastConfig(
            spatial_attention_block_skip_range=PYRAMID_SKIP_RANGE,
            spatial_attention_timestep_skip_range=(100, 800),
            current_timestep_callback=lambda: int(diffusers_pipe(pipe).current_timestep),
        )
    denoiser(pipe).enable_cache(config)  # type: ignore[operator]
