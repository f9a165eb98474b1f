"""``animfleet model tune``: measure every serving configuration, keep the fastest correct one.

For one model and device, each candidate of
:func:`workers.model.runtime.boot_tune.candidates` (the list a worker measures at boot:
precision, fp32 and bf16 where the device has bf16 arithmetic; compilation, eager or compiled:
the AOT packages when they match, else torch.compile; context de-dup and attention kernel, for
U-Nets with attention) is timed on the worker's shape buckets by
:mod:`tools.serving.measure`, interleaved. A combination whose frames fall below the PSNR floor
against the fp32 eager, stock-attention reference on any bucket is rejected; the fastest of the
rest (summed over buckets) is written to ``serving_profile.json`` for the device.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from tools.serving.measure import Config, Result, measure
from workers.model.runtime.boot_tune import candidates
from workers.model.runtime.loading import ShapeBucket, Variant
from workers.model.runtime.profile import (
    PSNR_FLOOR_DB,
    Choice,
    DeviceProfile,
    Measurement,
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


def grid(model_dir: Path, device: str, compile: bool = True) -> list[Choice]:
    """The combinations to measure on ``device``: the worker's boot candidates for its kind,
    with stock attention and pinned kernels too for a U-Net with attention. The first is the
    fp32 eager reference."""
    return candidates(device_key(device), compile, attention=has_attention(model_dir))


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
