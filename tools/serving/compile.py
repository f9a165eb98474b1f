"""``animfleet model compile``: AOTInductor packages of the U-Net for every size it serves.

The U-Net is exported (torch.export) with the inputs the pipeline really gives it for each
listed bucket, recorded from one eager step, and compiled ahead of time into ``aot/<key>/``
beside the model (see :mod:`workers.model.runtime.aot` for the key): one static package per
bucket, and one with symbolic frames, height and width for every other size a job can reach
(:func:`served_sizes`). Precision and context de-dup follow the model's serving profile for
this device unless given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from animfleet_api.bounds import MAX_FRAMES, MIN_FRAMES
from tools.serving.tune import base_variant
from workers.model.networks.motion_unet import MotionUNet
from workers.model.pipelines.generation import GenerationParams
from workers.model.pipelines.masked import size_multiple
from workers.model.pipelines.render import WORKING_SIDE
from workers.model.runtime.aot import (
    AOT_DIR,
    Manifest,
    Shape,
    SizeRange,
    _inputs,
    artifact_key,
    build_packages,
)
from workers.model.runtime.loading import ShapeBucket, load_pipeline
from workers.model.runtime.profile import Choice, choose, device_key


def record_calls(pipe: Any, buckets: list[ShapeBucket]) -> dict[Shape, tuple[Any, ...]]:
    """The U-Net's inputs for each bucket, from its first call in one eager video."""
    calls: dict[Shape, tuple[Any, ...]] = {}

    def hook(_: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inputs = _inputs(args, kwargs)
        calls.setdefault(tuple(inputs[0].shape), inputs)

    handle = pipe.unet.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for bucket in buckets:
            image = np.full((bucket.height, bucket.width, 3), 127, dtype=np.uint8)
            pipe(
                image, GenerationParams("pan left slowly", bucket.frames, 8, num_inference_steps=1)
            )
    finally:
        handle.remove()
    # Cloned outside the pipeline's inference mode: export needs ordinary tensors.
    return {shape: tuple(_clone(x) for x in inputs) for shape, inputs in calls.items()}


def served_sizes(pipe: Any, shape: Shape) -> SizeRange | None:
    """Every U-Net input a job can give ``pipe`` with ``shape``'s batch and channels; None
    when its sizes are unbounded (a U-Net other than a MotionUNet runs at the requested size).

    A MotionUNet runs at the working size (:func:`workers.model.pipelines.render.working_size`):
    a request up to the working side as it is, a larger one's aspect ratio scaled to that side,
    a masked job's box the same way. Every side is a multiple of the pipeline's size multiple
    (the box's) up to the working side (in latent pixels); every frame count the API
    accepts."""
    if not isinstance(pipe.unet, MotionUNet):
        return None
    latent = 2 ** (len(pipe.vae.config.block_out_channels) - 1)  # pixels per latent side
    multiple = size_multiple(pipe) // latent
    return SizeRange(
        batch=shape[0],
        channels=shape[2],
        frames=(MIN_FRAMES, MAX_FRAMES),
        side=(multiple, WORKING_SIDE // latent),
        multiple=multiple,
    )


def _clone(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def compile_model(
    model_dir: Path,
    buckets: list[ShapeBucket],
    choice: Choice | None = None,
    progress: Callable[[str], None] = print,
    device: str = "cpu",
    dynamic: bool = True,
) -> Manifest:
    """Build the packages for ``choice`` (default: the profile's for this device); with
    ``dynamic`` also the package for every served size."""
    if choice is None:
        choice, source = choose(model_dir, device_key(device))
        progress(f"configuration: {choice.label()} ({source})")
    variant = replace(
        base_variant(model_dir), precision=choice.precision, context_dedup=choice.context_dedup
    )
    pipe = load_pipeline(model_dir, variant).to(device)
    calls = record_calls(pipe, buckets)
    key, expected = artifact_key(model_dir, choice.precision, device)
    manifest = expected.model_copy(update={"context_dedup": choice.context_dedup})
    sizes = served_sizes(pipe, next(iter(calls))) if calls and dynamic else None
    started = time.perf_counter()
    done = build_packages(pipe.unet, calls, model_dir / AOT_DIR / key, manifest, sizes)
    covers = ""
    if done.dynamic and done.dynamic_range:
        covers = f" and {done.dynamic} for {done.dynamic_range.label()}"
    progress(
        f"wrote {len(done.packages)} static packages{covers} to {model_dir / AOT_DIR / key} "
        f"in {time.perf_counter() - started:.0f} s"
    )
    return done
