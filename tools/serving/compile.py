"""``animfleet model compile``: AOTInductor packages of the U-Net, one per shape bucket.

The U-Net is exported (torch.export) with the inputs the pipeline really gives it for each
bucket, recorded from one eager step, and compiled ahead of time into ``aot/<key>/`` beside the
model (see :mod:`workers.model.runtime.aot` for the key). Precision and context de-dup follow the
model's serving profile for this device unless given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools.serving.tune import base_variant
from workers.model.pipelines.generation import GenerationParams
from workers.model.runtime.aot import (
    AOT_DIR,
    Manifest,
    Shape,
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


def _clone(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def compile_model(
    model_dir: Path,
    buckets: list[ShapeBucket],
    choice: Choice | None = None,
    progress: Callable[[str], None] = print,
    device: str = "cpu",
) -> Manifest:
    """Build the packages for ``choice`` (default: the profile's for this device)."""
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
    started = time.perf_counter()
    done = build_packages(pipe.unet, calls, model_dir / AOT_DIR / key, manifest)
    progress(
        f"wrote {len(done.packages)} packages to {model_dir / AOT_DIR / key} "
        f"in {time.perf_counter() - started:.0f} s"
    )
    return done
