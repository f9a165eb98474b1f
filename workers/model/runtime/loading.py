"""How a model directory becomes a pipeline the worker runs: its variant (steps, guidance,
precision, scheduler, attention), the shape buckets it warms up, input images fitted to a job's
size, and the serving profile's choice for this device."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from diffusers.utils import logging as diffusers_logging
from PIL import Image, ImageOps
from transformers.utils import logging as transformers_logging

from animfleet.families import BUILT_IN_CLASS, class_name_of
from workers.model.families.registry import load_family
from workers.model.networks.attention import install_context_dedup
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.schedulers import make_scheduler
from workers.model.runtime.profile import SAFE, Attention, Choice, Precision, lookup
from workers.settings import WorkerSettings

log = logging.getLogger("animfleet.worker.model")

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# The VAE runs in fp32 in both precisions. It encodes one image and decodes once per video, and
# on this CPU bf16 did not reliably pay there (`make bench-model`'s VAE line: 8 frames at 64x64
# 1.6 s fp32 vs 1.3 s bf16, at 128x128 4.5 s vs 6.0 s) while it moves the frames to ~48 dB PSNR
# on its own. Family checkpoints (SVD, LTX-Video, Wan, ...) keep diffusers' behaviour: their
# pipelines feed the VAE latents in the model dtype.
VAE_DTYPE = torch.float32


@dataclass(frozen=True)
class Variant:
    """How a loaded model is run.

    ``passes_per_step`` is the U-Net passes one denoising step costs: 3 for the teacher's
    guidance (unconditional, image, image + text), 2 for an SVD checkpoint, 1 for a
    guidance-distilled student (set from the model when it loads). ``precision`` is the U-Net's
    and encoders' dtype (fp32 unless a serving profile measured bf16 faster and close enough);
    ``context_dedup`` installs the repeated-context attention processor.
    """

    name: str
    steps: int = 15
    image_guidance_scale: float = 1.5
    text_guidance_scale: float = 3.0
    scheduler: str = "dpmsolver++"
    precision: Precision = "fp32"
    context_dedup: bool = True
    passes_per_step: int = 3
    # (image low, high), (text low, high): the scales a guidance-distilled student knows.
    guidance_range: tuple[tuple[float, float], tuple[float, float]] | None = None
    # torch's scaled-dot-product kernel for the attention ("auto": torch picks).
    attention: Attention = "auto"
    # DeepCache-style: a MotionUNet's deep blocks run every Nth step (0: every step).
    block_cache: int = 0


@dataclass(frozen=True)
class ShapeBucket:
    """A (frames, height, width) the worker compiles and warms up for at start."""

    frames: int
    height: int
    width: int

    @classmethod
    def parse(cls, text: str) -> ShapeBucket:
        """``"8x64x64"`` -> frames 8, height 64, width 64."""
        frames, height, width = (int(part) for part in text.lower().split("x"))
        return cls(frames, height, width)


def prepare_image(data: bytes, width: int, height: int) -> npt.NDArray[np.uint8]:
    """Decode, honour EXIF orientation, centre-crop to the aspect ratio and resize."""
    with Image.open(io.BytesIO(data)) as opened:
        image = ImageOps.exif_transpose(opened).convert("RGB")
    fitted = ImageOps.fit(image, (width, height), Image.Resampling.BICUBIC)
    return np.array(fitted, dtype=np.uint8)  # a writable copy: torch.from_numpy needs one


def load_pipeline(model_dir: str | Path, variant: Variant) -> Any:
    """An ``AnimationPipeline`` in the variant's precision with its scheduler and attention
    processor; or, for a directory whose ``model_index.json`` names another pipeline class, its
    family's adapter (:mod:`workers.model.families`), which refuses a class no family serves
    (:class:`animfleet.families.UnknownFamily`)."""
    diffusers_logging.disable_progress_bar()
    diffusers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    dtype = DTYPES[variant.precision]
    if class_name_of(model_dir) != BUILT_IN_CLASS:
        return load_family(model_dir, dtype=dtype)
    dtypes = {"default": dtype, "vae": VAE_DTYPE}
    pipe = AnimationPipeline.from_pretrained(str(model_dir), dtype=dtypes)
    pipe.scheduler = make_scheduler(variant.scheduler, pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    if variant.context_dedup:
        install_context_dedup(pipe.unet)
    return pipe


def serving_choice(
    settings: WorkerSettings, model_dir: Path, kind: str
) -> tuple[Choice | None, str]:
    """The serving profile's pick for device ``kind`` and where it came from; None (and why)
    when the profile has no valid entry for it, or profiles are off."""
    if not settings.profile:
        return SAFE, "profiles off (ANIMFLEET_WORKER_PROFILE=0); serving the safe choice"
    return lookup(model_dir, kind)


def with_overrides(settings: WorkerSettings, choice: Choice, source: str) -> tuple[Choice, str]:
    """``choice`` with any of precision, compile, context de-dup and attention that the
    environment sets explicitly on top; logged, as the worker serves it."""
    fields = ("precision", "compile", "context_dedup", "attention")
    overrides = {name: getattr(settings, name) for name in fields}
    overrides = {name: value for name, value in overrides.items() if value is not None}
    if overrides:
        choice = choice.model_copy(update=overrides)
        source += f"; set in the environment: {overrides}"
    log.info("model.serving choice=%r source=%r", choice.label(), source)
    return choice, source
