"""``animfleet model tune``: measure every serving configuration, keep the fastest correct one.

For one model and device, each combination of precision (fp32, bf16), compilation (eager,
compiled: the AOT packages when they match, else torch.compile), context de-dup and attention
kernel (the last two only for U-Nets with attention) is timed on the worker's shape buckets by
:mod:`tools.serving.measure`, interleaved. A combination whose frames fall below the PSNR floor
against the fp32 eager, stock-attention reference on any bucket is rejected; the fastest of the
rest (summed over buckets) is written to ``serving_profile.json`` for the device.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from tools.serving.measure import Config, Result, measure
from workers.model.runtime.loading import ShapeBucket, Variant
from workers.model.runtime.profile import (
    PSNR_FLOOR_DB,
    Attention,
    Choice,
    DeviceProfile,
    Measurement,
    Precision,
    device_key,
    psnr,
    save_profile,
    weights_hash,
)
from workers.model.runtime.serving import load_serving


def has_attention(model_dir: Path) -> bool:
    """Whether the U-Net is diffusers' spatio-temporal one (attention, a repeated context)."""
    index = json.loads((model_dir / "model_index.json").read_text())
    return bool(index.get("unet", [None, None])[1] == "UNetSpatioTemporalConditionModel")


def attention_kernels(device: str) -> list[Attention]:
    return ["auto", "math", "flash"] if device == "cpu" else ["auto", "flash", "efficient", "cudnn"]


def grid(model_dir: Path, device: str, compile: bool = True) -> list[Choice]:
    """The combinations to measure; the first is the fp32 eager stock-attention reference."""
    attention = has_attention(model_dir)
    dedups = [False, True] if attention else [True]  # de-dup is a no-op without attention
    kernels: list[Attention] = attention_kernels(device) if attention else ["auto"]
    compiles = [False, True] if compile else [False]
    precisions: list[Precision] = ["fp32", "bf16"]
    choices = [
        Choice(precision=p, compile=c, context_dedup=d, attention=k)
        for c, p, d, k in itertools.product(compiles, precisions, dedups, kernels)
    ]
    return choices


def base_variant(model_dir: Path, steps: int | None = None) -> Variant:
    """The variant the worker serves for this model, before the tuned choice."""
    serving = load_serving(model_dir)
    return Variant(
        name=model_dir.name,
        steps=steps or serving.steps or Variant.steps,
        image_guidance_scale=serving.image_guidance_scale,
        text_guidance_scale=serving.text_guidance_scale,
    )


def configure(
    model_dir: Path, choice: Choice, variant: Variant, label: str = "", device: str = "cpu"
) -> Config:
    variant = replace(
        variant,
        precision=choice.precision,
        context_dedup=choice.context_dedup,
        attention=choice.attention,
    )
    return Config(
        label or choice.label(), model_dir, variant, choice.compile, choice.compile, device
    )


def tune(
    model_dir: Path,
    buckets: list[ShapeBucket],
    *,
    floor_db: float = PSNR_FLOOR_DB,
    repeats: int = 5,
    threads: int = 1,
    compile: bool = True,
    device: str = "cpu",
    progress: Callable[[str], None] = print,
) -> DeviceProfile:
    """Measure the grid on each bucket and return the profile entry (not yet saved)."""
    choices = grid(model_dir, device, compile)
    variant = base_variant(model_dir)
    seconds = dict.fromkeys(choices, 0.0)
    worst = dict.fromkeys(choices, math.inf)
    for bucket in buckets:
        progress(f"bucket {bucket.frames}x{bucket.height}x{bucket.width}")
        configs = [configure(model_dir, choice, variant, device=device) for choice in choices]
        results: list[Result] = measure(configs, bucket, repeats, threads, progress)
        reference = results[0].frames
        assert reference is not None
        for choice, result in zip(choices, results, strict=True):
            seconds[choice] += result.seconds
            assert result.frames is not None
            worst[choice] = min(worst[choice], psnr(result.frames, reference))
            if choice.compile and not result.info.get("compiled"):
                worst[choice] = -math.inf  # the warm-up check refused it: it never served
    measured = []
    for choice in choices:
        accepted = worst[choice] >= floor_db
        note = "" if accepted else f"below the {floor_db:g} dB floor"
        if worst[choice] == -math.inf:
            note = "compiled frames failed the warm-up check; served eagerly"
        measured.append(
            Measurement(
                choice=choice,
                seconds_per_video=round(seconds[choice] / len(buckets), 4),
                psnr_db=round(worst[choice], 1) if math.isfinite(worst[choice]) else worst[choice],
                accepted=accepted,
                note=note,
            )
        )
    best = min((m for m in measured if m.accepted), key=lambda m: m.seconds_per_video)
    return DeviceProfile(
        device=device_key(device),
        torch=torch.__version__,
        weights=weights_hash(model_dir),
        buckets=[f"{b.frames}x{b.height}x{b.width}" for b in buckets],
        steps=variant.steps,
        threads=threads,
        floor_db=floor_db,
        chosen=best.choice,
        measured=measured,
    )


def report(entry: DeviceProfile) -> str:
    lines = [
        f"{'configuration':<44} {'s per video':>11} {'PSNR vs fp32 eager':>19}  verdict",
    ]
    for m in sorted(entry.measured, key=lambda m: m.seconds_per_video):
        verdict = "CHOSEN" if m.choice == entry.chosen else ("ok" if m.accepted else "FAIL")
        quality = "inf" if m.psnr_db == math.inf else f"{m.psnr_db:.1f}"
        lines.append(
            f"{m.choice.label():<44} {m.seconds_per_video:>11.3f} {quality:>16} dB  {verdict}"
            + (f" ({m.note})" if m.note else "")
        )
    return "\n".join(lines)


def tune_and_save(model_dir: Path, buckets: list[ShapeBucket], **kwargs: object) -> Path:
    entry = tune(model_dir, buckets, **kwargs)  # type: ignore[arg-type]
    print(report(entry))
    return save_profile(model_dir, entry)
