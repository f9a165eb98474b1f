"""What a worker holds for its whole life: one loaded pipeline, and how to run a job on it."""

from __future__ import annotations

import importlib
import io
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from diffusers.utils import logging as diffusers_logging
from PIL import Image, ImageOps
from transformers.utils import logging as transformers_logging

from animfleet.errors import PermanentError
from animfleet.jobs import JobParams
from animfleet.models import resolve_model
from workers.errors import WorkerError
from workers.model.attention import install_context_dedup
from workers.model.compiled import CompiledModules, compile_modules
from workers.model.pipeline import AnimationPipeline, StepCallback, describe
from workers.model.schedulers import make_scheduler
from workers.model.serving import load_serving
from workers.model.svd import SVD_CLASS, SVDAnimation, pipeline_class_name
from workers.settings import WorkerSettings

log = logging.getLogger("animfleet.worker.model")

Precision = Literal["bf16", "fp32"]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# The VAE runs in fp32 in both precisions. It encodes one image and decodes once per video, and
# on this CPU bf16 did not reliably pay there (`make bench-model`'s VAE line: 8 frames at 64x64
# 1.6 s fp32 vs 1.3 s bf16, at 128x128 4.5 s vs 6.0 s) while it moves the frames to ~48 dB PSNR
# on its own. SVD directories keep diffusers' behaviour: their pipeline feeds the VAE latents in
# the model dtype.
VAE_DTYPE = torch.float32


class ModelError(WorkerError, PermanentError, RuntimeError):
    """The model failed on this input; retrying the same job will fail the same way."""


@dataclass(frozen=True)
class Variant:
    """How a loaded model is run.

    ``passes_per_step`` is the U-Net passes one denoising step costs: 3 for the teacher's
    guidance (unconditional, image, image + text), 2 for an SVD checkpoint, 1 for a
    guidance-distilled student (set from the model when it loads). ``precision`` is the U-Net's
    and encoders' dtype ("fp32" is the per-variant fallback); ``context_dedup`` installs the
    repeated-context attention processor.
    """

    name: str
    steps: int = 15
    image_guidance_scale: float = 1.5
    text_guidance_scale: float = 3.0
    scheduler: str = "dpmsolver++"
    precision: Precision = "bf16"
    context_dedup: bool = True
    passes_per_step: int = 3
    # (image low, high), (text low, high): the scales a guidance-distilled student knows.
    guidance_range: tuple[tuple[float, float], tuple[float, float]] | None = None


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
    """An ``AnimationPipeline``, or an :class:`SVDAnimation` for an SVD checkpoint directory,
    in the variant's precision and with its scheduler and attention processor."""
    diffusers_logging.disable_progress_bar()
    diffusers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    dtype = DTYPES[variant.precision]
    pipe: Any
    if pipeline_class_name(model_dir) == SVD_CLASS:
        pipe = SVDAnimation.from_pretrained(model_dir, dtype=dtype)
    else:
        dtypes = {"default": dtype, "vae": VAE_DTYPE}
        pipe = AnimationPipeline.from_pretrained(str(model_dir), dtype=dtypes)
        pipe.scheduler = make_scheduler(variant.scheduler, pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    if variant.context_dedup:
        install_context_dedup(pipe.unet)
    return pipe


class Animator:
    """Loads a pipeline once (``from_pretrained``) and animates images with it.

    With ``compile``, the U-Net (and with ``compile_decoder`` the VAE decoder) is compiled;
    :meth:`warm_up` then compiles each shape bucket before the first job. A compilation that
    fails leaves the model eager.
    """

    def __init__(
        self,
        model_dir: str | Path,
        variant: Variant | None = None,
        *,
        compile: bool = False,
        compile_decoder: bool = False,
        max_buckets: int = 8,
    ) -> None:
        threads = int(os.environ.get("ANIMFLEET_TORCH_THREADS", "0")) or (os.cpu_count() or 1)
        torch.set_num_threads(threads)
        started = time.perf_counter()
        self.model_dir = Path(model_dir)
        self.variant = variant or Variant(name=self.model_dir.name)
        if pipeline_class_name(model_dir) == SVD_CLASS and self.variant.passes_per_step != 2:
            self.variant = replace(self.variant, passes_per_step=2)
        self.pipeline: Any = load_pipeline(model_dir, self.variant)
        if getattr(self.pipeline, "guidance_distilled", False):
            self.variant = replace(self.variant, passes_per_step=1)
        self.compiled: CompiledModules | None = None
        if compile:
            self.compiled = compile_modules(self.pipeline, compile_decoder, max_buckets)
        self.load_time_s = time.perf_counter() - started
        self.warmup_time_s = 0.0
        self.info: dict[str, Any] = {
            "model": str(model_dir),
            **describe(self.pipeline),
            "scheduler": self.variant.scheduler,
            "context_dedup": self.variant.context_dedup,
            "compiled": sorted(self.compiled.modules) if self.compiled else [],
        }

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> Animator:
        """The worker's model as its settings say; compiled and warmed up if they ask for it."""
        buckets = [ShapeBucket.parse(b) for b in settings.shape_buckets.split(",") if b.strip()]
        model_dir = resolve_model(settings.model_dir)
        serving = load_serving(model_dir)
        trained = serving.guidance_range
        variant = Variant(
            name=model_dir.name,
            steps=settings.steps or serving.steps or Variant.steps,
            image_guidance_scale=serving.image_guidance_scale,
            text_guidance_scale=serving.text_guidance_scale,
            scheduler=settings.scheduler,
            precision=settings.precision,
            context_dedup=settings.context_dedup,
            guidance_range=(trained.image, trained.text) if trained else None,
        )
        animator = cls(
            model_dir,
            variant,
            compile=settings.compile,
            compile_decoder=settings.compile_decoder,
            max_buckets=len(buckets),
        )
        if settings.compile:
            animator.warm_up(buckets)
        return animator

    def warm_up(self, buckets: Sequence[ShapeBucket]) -> float:
        """Run each bucket once (compiling it); returns seconds. Falls back to eager if
        compiling fails, so the worker still serves."""
        started = time.perf_counter()
        for bucket in buckets:
            try:
                self._run_bucket(bucket)
            except Exception as error:
                if self.compiled is None:
                    raise
                log.error("model.compile_failed falling back to eager: %s", error)
                self.compiled.to_eager()
                self.compiled = None
                self.info["compiled"] = []
                self._run_bucket(bucket)
        if self.compiled is not None:
            self.compiled.finish_warmup()
        self.warmup_time_s = time.perf_counter() - started
        return self.warmup_time_s

    def _run_bucket(self, bucket: ShapeBucket) -> None:
        image = np.full((bucket.height, bucket.width, 3), 127, dtype=np.uint8)
        self.pipeline(image, "", num_frames=bucket.frames, fps=8, num_inference_steps=2)

    @property
    def recompiles(self) -> int:
        """Graphs compiled after warm-up (0 while requests stay in warmed buckets)."""
        return self.compiled.recompiles if self.compiled else 0

    def animate(
        self, image: bytes, params: JobParams, on_step: StepCallback | None = None
    ) -> npt.NDArray[np.uint8]:
        """Frames (T, H, W, 3 uint8) for one job; raises :class:`ModelError` on failure."""
        pixels = prepare_image(image, params.width, params.height)
        try:
            frames: npt.NDArray[np.uint8] = self.pipeline(
                pixels,
                params.prompt,
                num_frames=params.frames,
                fps=params.fps,
                num_inference_steps=params.steps or self.variant.steps,
                image_guidance_scale=self.variant.image_guidance_scale,
                text_guidance_scale=self.variant.text_guidance_scale,
                seed=params.seed,
                on_step=on_step,
            )
        except (RuntimeError, ValueError) as error:
            raise ModelError(f"{type(error).__name__}: {error}") from error
        return frames


def load_animator(settings: WorkerSettings) -> Animator:
    """The animator the worker serves: ``settings.animator`` ("module:Class", a subclass of
    :class:`Animator` built by its ``from_settings``) when set, else the diffusers pipeline.

    A custom class is how a deployment plugs in another model, and how load and fault tests
    run a stand-in that only holds time (``tests/fixtures/standin.py``).
    """
    if settings.animator is None:
        return Animator.from_settings(settings)
    module_name, _, attribute = settings.animator.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ModelError(f"animator {settings.animator!r} cannot be imported: {error}") from error
    if not (isinstance(factory, type) and issubclass(factory, Animator)):
        raise ModelError(f"animator {settings.animator!r} is not a subclass of Animator")
    animator: Animator = factory.from_settings(settings)
    return animator
