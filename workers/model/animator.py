"""What a worker holds for its whole life: one loaded pipeline, and how to run a job on it."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from animfleet.errors import PermanentError
from animfleet.families import BUILT_IN_CLASS, UnknownFamily, class_name_of
from animfleet.jobs import JobParams
from animfleet.shipped_models import resolve_model
from workers.errors import WorkerError
from workers.model.addons.store import AddonError, AddonStore, job_addons, open_addons
from workers.model.families.base import FamilyPipeline
from workers.model.families.serving import serve_at_boot
from workers.model.imaging.brush import BrushPlan
from workers.model.imaging.templates import DEFAULT_MAX_BYTES, Features, TemplateCache
from workers.model.pipelines.animation import StepCallback, describe
from workers.model.pipelines.brushed import job_motion
from workers.model.pipelines.generation import GenerationParams
from workers.model.pipelines.masked import animate_masked, encoder, regionizer, whole_frame
from workers.model.pipelines.render import render_job, renders
from workers.model.runtime.aot import AOTDenoiser, load_packages
from workers.model.runtime.aot import log as aot_log
from workers.model.runtime.aot_share import SharedPackages
from workers.model.runtime.block_cache import BlockCache, install_block_cache
from workers.model.runtime.boot_tune import SharedProfiles, measure
from workers.model.runtime.compiled import CompiledModules, compile_modules
from workers.model.runtime.loading import (
    ShapeBucket,
    Variant,
    load_pipeline,
    prepare_image,
    serving_choice,
    with_overrides,
)
from workers.model.runtime.profile import (
    PSNR_FLOOR_DB,
    SAFE,
    Choice,
    device_key,
    psnr,
)
from workers.model.runtime.serving import load_serving
from workers.settings import WorkerSettings

log = logging.getLogger("animfleet.worker.model")


class ModelError(WorkerError, PermanentError, RuntimeError):
    """The model failed on this input; retrying the same job will fail the same way."""


class Animator:
    """Loads a pipeline once (``from_pretrained``) and animates images with it.

    With ``compile``, the U-Net (and with ``compile_decoder`` the VAE decoder) is compiled: from
    matching ahead-of-time packages when ``aot`` and there are some, else with torch.compile
    (unless ``jit`` is off: then it stays eager). Packages missing beside the model are fetched
    from ``shared_packages`` (the region's bucket) when a peer published them.
    :meth:`warm_up` then runs each shape bucket before the first job and compares the compiled
    frames with the eager model's: a compilation that fails, or whose frames fall below
    ``verify_psnr_db``, leaves the model eager.
    """

    def __init__(
        self,
        model_dir: str | Path,
        variant: Variant | None = None,
        *,
        compile: bool = False,
        compile_decoder: bool = False,
        max_buckets: int = 8,
        aot: bool = False,
        verify_psnr_db: float = PSNR_FLOOR_DB,
        device: str = "cpu",
        jit: bool = True,
        template_bytes: int = DEFAULT_MAX_BYTES,
        shared_packages: SharedPackages | None = None,
    ) -> None:
        threads = int(os.environ.get("ANIMFLEET_TORCH_THREADS", "0")) or (os.cpu_count() or 1)
        torch.set_num_threads(threads)
        started = time.perf_counter()
        self.model_dir = Path(model_dir)
        self.variant = variant or Variant(name=self.model_dir.name)
        self.verify_psnr_db = verify_psnr_db
        self.device = device
        try:
            self.pipeline: Any = load_pipeline(model_dir, self.variant)
        except UnknownFamily as error:
            raise ModelError(str(error)) from error
        # A diffusers family's pipeline (SVD, LTX-Video, Wan, ...) rather than the built-in model.
        self.family: FamilyPipeline | None = None
        if isinstance(self.pipeline, FamilyPipeline):
            self.family = self.pipeline
            self.variant = replace(self.variant, passes_per_step=self.family.passes_per_step)
        if device != "cpu":
            self.pipeline.to(device)
        if getattr(self.pipeline, "guidance_distilled", False):
            self.variant = replace(self.variant, passes_per_step=1)
        if self.variant.block_cache and compile:
            log.warning("model.block_cache_eager block caching runs eagerly; not compiling")
            compile = False
        self.block_cache: BlockCache | None = install_block_cache(
            getattr(self.pipeline, "unet", None), self.variant.block_cache
        )
        # Per-image work (fitted frames, image features) for masked jobs, kept across jobs.
        self.templates = TemplateCache(
            prepare_image, regionizer(self.pipeline), encoder(self.pipeline), template_bytes
        )
        # Add-ons for this model, loaded in the background from now on (before any job).
        self.addons: AddonStore | None = open_addons(self.model_dir, self.pipeline, device)
        self.compiled: CompiledModules | AOTDenoiser | None = None
        self.aot_status = "not asked"
        if compile and aot:
            if shared_packages is not None:  # a peer of this kind may have published them
                shared_packages.fetch(self.model_dir, self.variant.precision, device)
            self.compiled, self.aot_status = load_packages(
                self.pipeline.unet,
                self.model_dir,
                self.variant.precision,
                self.variant.context_dedup,
                device,
            )
            if self.compiled is None:
                instead = "torch.compile at boot" if jit else "eager"
                aot_log.warning("model.aot_unavailable", serving=instead, why=self.aot_status)
            else:
                aot_log.info("model.aot_loaded", packages=self.aot_status)
        if compile and jit and self.compiled is None:
            self.compiled = compile_modules(self.pipeline, compile_decoder, max_buckets)
        self.load_time_s = time.perf_counter() - started
        self.warmup_time_s = 0.0
        self.info: dict[str, Any] = {
            "model": str(model_dir),
            **(self.family.describe() if self.family else describe(self.pipeline)),
            "scheduler": self.variant.scheduler,
            "context_dedup": self.variant.context_dedup,
            "attention": self.variant.attention,
            "compiled": self._compiled_names(),
            "aot": self.aot_status,
            "block_cache": self.variant.block_cache,
            "addons": self.addons.names() if self.addons else [],
        }

    def _compiled_names(self) -> list[str]:
        if self.compiled is None:
            return []
        suffix = " (aot)" if isinstance(self.compiled, AOTDenoiser) else ""
        return sorted(name + suffix for name in self.compiled.modules)

    @classmethod
    def from_settings(
        cls, settings: WorkerSettings, shared: SharedProfiles | None = None
    ) -> Animator:
        """The worker's model as its settings and serving profile say; compiled, warmed up and
        verified if they ask for it. A device kind the profile lacks is measured at boot
        (:mod:`workers.model.runtime.boot_tune`), or read from ``shared`` where a peer measured
        it."""
        buckets = [ShapeBucket.parse(b) for b in settings.shape_buckets.split(",") if b.strip()]
        model_dir = resolve_model(settings.model_dir)
        kind = settings.device_kind or device_key(settings.device)
        if class_name_of(model_dir) != BUILT_IN_CLASS:  # a diffusers family: its own profile
            animator = cls._build(settings, model_dir, SAFE, buckets, False)
            assert animator.family is not None
            first = buckets[0] if buckets else ShapeBucket(9, 64, 64)
            served = serve_at_boot(
                model_dir,
                kind=kind,
                device=settings.device,
                steps=animator.variant.steps,
                bucket=(first.frames, first.height, first.width),
                budget_s=settings.boot_tune_s if settings.profile else 0.0,
                objects=shared.objects if shared else None,
            )
            served.hook(settings.device, animator.variant.steps)(animator.family)
            animator.info.update(serving=served.choice.label(), serving_source=served.source)
            return animator
        profiled, source = serving_choice(settings, model_dir, kind)
        # Where the served choice came from, in a word (bench and logs print it).
        origin = "profile entry" if profiled is not None else "fallback"
        if not settings.profile:
            origin = "profiles off"

        # A profile's compile means its AOT packages (compiling at boot takes minutes on a CPU)
        # unless the environment asks for torch.compile, or the choice was measured compiled
        # at boot on this kind (no packages exist for a kind nobody profiled).
        jit = settings.compile is True

        def build(choice: Choice) -> Animator:
            animator = cls._build(
                settings, model_dir, choice, buckets, jit or choice.compile, shared
            )
            if animator.compiled is not None:
                animator.warm_up(buckets)
            return animator

        if profiled is None and settings.profile and settings.boot_tune_s > 0 and buckets:
            entry = shared.read(model_dir, kind) if shared else None
            if entry is not None:
                profiled, source = entry.chosen, f"measured by a peer of kind {kind} ({entry.note})"
                origin = "read from the bucket"
                jit = jit or entry.chosen.compile
            else:
                budget, compiled = settings.boot_tune_s, settings.boot_tune_compile
                found = measure(model_dir, kind, build, buckets[0], budget, compiled)
                if shared:
                    shared.write(model_dir, found.entry)
                source = f"no profile entry for {kind}: {found.entry.note}"
                choice, source = with_overrides(settings, found.entry.chosen, source)
                if choice == found.entry.chosen:  # serve the candidate already loaded
                    found.chosen.info.update(
                        serving=choice.label(),
                        serving_source=source,
                        serving_origin="measured at boot",
                    )
                    return found.chosen
                profiled, origin = found.entry.chosen, "measured at boot"
        choice, source = with_overrides(settings, profiled or SAFE, source)
        animator = cls._build(settings, model_dir, choice, buckets, jit, shared)
        if animator.compiled is not None:
            animator.warm_up(buckets)
        animator.info.update(serving=choice.label(), serving_source=source, serving_origin=origin)
        return animator

    @classmethod
    def _build(
        cls,
        settings: WorkerSettings,
        model_dir: Path,
        choice: Choice,
        buckets: list[ShapeBucket],
        jit: bool,
        shared: SharedProfiles | None = None,
    ) -> Animator:
        serving = load_serving(model_dir)
        trained = serving.guidance_range
        variant = Variant(
            name=model_dir.name,
            steps=settings.steps or serving.steps or Variant.steps,
            image_guidance_scale=serving.image_guidance_scale,
            text_guidance_scale=serving.text_guidance_scale,
            scheduler=settings.scheduler,
            precision=choice.precision,
            context_dedup=choice.context_dedup,
            guidance_range=(trained.image, trained.text) if trained else None,
            attention=choice.attention,
            block_cache=settings.block_cache,
        )
        return cls(
            model_dir,
            variant,
            compile=choice.compile,
            compile_decoder=settings.compile_decoder,
            max_buckets=len(buckets),
            aot=settings.aot,
            verify_psnr_db=settings.verify_psnr_db,
            device=settings.device,
            jit=jit,
            template_bytes=settings.template_cache_mb * 2**20,
            shared_packages=SharedPackages(shared.objects) if shared else None,
        )

    def warm_up(self, buckets: Sequence[ShapeBucket]) -> float:
        """Run each bucket once (compiling it) and check the frames against the eager model's;
        returns seconds. Falls back to eager if compiling fails or changes the output, so the
        worker still serves, and serves what the eager model would."""
        started = time.perf_counter()
        self.info["verified_psnr_db"] = {}
        for bucket in buckets:
            try:
                frames = self.card_video(bucket)
            except Exception as error:
                if self.compiled is None:
                    raise
                log.error("model.compile_failed falling back to eager: %s", error)
                self._serve_eagerly()
                self.card_video(bucket)
                continue
            if self.compiled is not None:
                with self.compiled.eager():
                    reference = self.card_video(bucket)
                quality = psnr(frames, reference)
                self.info["verified_psnr_db"][_bucket_name(bucket)] = round(quality, 1)
                if quality < self.verify_psnr_db:
                    log.error(
                        "model.compiled_mismatch bucket=%s psnr_db=%.1f floor_db=%.1f: "
                        "serving eagerly",
                        _bucket_name(bucket),
                        quality,
                        self.verify_psnr_db,
                    )
                    self._serve_eagerly()
        if self.compiled is not None:
            self.compiled.finish_warmup()
        self.warmup_time_s = time.perf_counter() - started
        return self.warmup_time_s

    def _serve_eagerly(self) -> None:
        assert self.compiled is not None
        self.compiled.to_eager()
        self.compiled = None
        self.info["compiled"] = []

    def card_video(self, bucket: ShapeBucket) -> npt.NDArray[np.uint8]:
        """One video of the bucket at the served step count, on a test card."""
        y, x = np.mgrid[0 : bucket.height, 0 : bucket.width]
        card = np.stack([x * 255 // bucket.width, y * 255 // bucket.height, (x ^ y) & 255], -1)
        with self._kernels():
            params = GenerationParams(
                "pan left slowly",
                num_frames=bucket.frames,
                fps=8,
                num_inference_steps=self.variant.steps,
                image_guidance_scale=self.variant.image_guidance_scale,
                text_guidance_scale=self.variant.text_guidance_scale,
            )
            frames: npt.NDArray[np.uint8] = self.pipeline(card.astype(np.uint8), params)
        return frames

    def _kernels(self) -> contextlib.AbstractContextManager[Any]:
        """The variant's scaled-dot-product attention kernel, pinned for a call."""
        if self.variant.attention == "auto":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {
            "math": SDPBackend.MATH,
            "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION,
        }[self.variant.attention]
        return sdpa_kernel(backend)

    @property
    def recompiles(self) -> int:
        """Graphs compiled after warm-up (0 while requests stay in warmed buckets)."""
        return self.compiled.recompiles if self.compiled else 0

    def animate(
        self,
        image: bytes,
        params: JobParams,
        on_step: StepCallback | None = None,
        mask: bytes | None = None,
        inputs: Mapping[str, bytes] | None = None,
    ) -> npt.NDArray[np.uint8]:
        """Frames (T, H, W, 3 uint8) for one job; raises :class:`ModelError` on failure.
        With ``mask`` (a PNG) only its white part moves (:mod:`workers.model.pipelines.masked`).
        ``inputs``: the job's extra images by input name (add-ons' control images, brushed
        regions' masks: :mod:`workers.model.pipelines.brushed`)."""
        if mask is not None:
            if inputs:
                raise ModelError("a masked job cannot take an image-conditioned add-on yet")
            try:
                return animate_masked(self, image, mask, params, on_step)
            except ValueError as error:
                raise ModelError(f"mask: {error}") from error
        frame, features = whole_frame(self, image, params)  # from the template cache
        brush = None
        if params.regions:
            try:
                brush = job_motion(self, image, frame, params, inputs or {})
            except ValueError as error:
                raise ModelError(str(error)) from error
        return self.run_frames(frame, params, on_step, features, inputs, brush)

    def run_frames(
        self,
        pixels: npt.NDArray[np.uint8],
        params: JobParams,
        on_step: StepCallback | None = None,
        features: Features | None = None,
        inputs: Mapping[str, bytes] | None = None,
        brush: BrushPlan | None = None,
    ) -> npt.NDArray[np.uint8]:
        """Frames of one fitted frame (H, W, 3 uint8); ``features``: its image features, when
        cached; ``inputs``: as :meth:`animate`'s; ``brush``: the brushed regions' motion,
        composed with the model's (a brushed job is always rendered). Raises
        :class:`ModelError`."""
        extra = {"features": features} if features is not None else {}
        try:
            with self._kernels(), self._addons_active(params, inputs):
                # The U-Net at its working size, then rendered (with the brush's motion).
                generation = GenerationParams.for_job(params, self.variant)
                if self.family is None and (renders(*pixels.shape[:2]) or brush is not None):
                    return render_job(self.pipeline, pixels, generation, on_step, brush)
                frames: npt.NDArray[np.uint8] = self.pipeline(pixels, generation, on_step, **extra)
        except (RuntimeError, ValueError) as error:
            raise ModelError(f"{type(error).__name__}: {error}") from error
        return frames

    def _addons_active(
        self, params: JobParams, inputs: Mapping[str, bytes] | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """The job's add-ons for the call, eagerly (a compiled graph would skip their hooks);
        none: the base model. Raises :class:`ModelError` for one this worker cannot serve."""
        eager = self.compiled.eager() if self.compiled is not None and params.addons else None
        try:
            return job_addons(self.addons, params, inputs or {}, eager)
        except AddonError as error:
            raise ModelError(str(error)) from error


def _bucket_name(bucket: ShapeBucket) -> str:
    return f"{bucket.frames}x{bucket.height}x{bucket.width}"


def load_animator(settings: WorkerSettings, shared: SharedProfiles | None = None) -> Animator:
    """The animator the worker serves: ``settings.animator`` ("module:Class", a subclass of
    :class:`Animator` built by its ``from_settings``) when set, else the diffusers pipeline.

    A custom class is how a deployment plugs in another model, and how load and fault tests
    run a stand-in that only holds time (``tests/fixtures/standin.py``).
    """
    if settings.animator is None:
        return Animator.from_settings(settings, shared)
    module_name, _, attribute = settings.animator.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ModelError(f"animator {settings.animator!r} cannot be imported: {error}") from error
    if not (isinstance(factory, type) and issubclass(factory, Animator)):
        raise ModelError(f"animator {settings.animator!r} is not a subclass of Animator")
    animator: Animator = factory.from_settings(settings)
    return animator
