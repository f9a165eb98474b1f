"""What every family adapter shares: loading a ``save_pretrained`` directory with its own
diffusers class, the hook where a serving profile is applied, and the call the worker makes.

An adapter turns the worker's call (a fitted image, :class:`GenerationParams`, a per-step
callback) into its pipeline's keyword arguments (:meth:`FamilyPipeline.call_kwargs`, the one
thing each family writes), runs it with a seeded generator, and reports every denoising step
through ``callback_on_step_end``. A callback that raises (a job canceled) stops the pipeline
between two steps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import diffusers
import numpy as np
import numpy.typing as npt
import torch
from diffusers.utils import logging as diffusers_logging
from PIL import Image
from transformers.utils import logging as transformers_logging

from animfleet.families import FamilySpec, read_spec
from workers.model.pipelines.animation import StepCallback, check_size
from workers.model.pipelines.generation import GenerationParams

# Applied to a loaded pipeline before its first job: the serving profile's dtype, attention
# backend, compile, caching hooks, offloading (:meth:`FamilyPipeline.load`'s ``profile``).
ProfileHook = Callable[["FamilyPipeline"], None]


class FamilyPipeline:
    """A loaded diffusers image-to-video pipeline behind the worker's model call.

    ``pipe`` is the diffusers pipeline itself (its ``transformer`` or ``unet``, ``vae``,
    ``scheduler`` are what a serving profile changes); ``spec`` the checkpoint's rules.
    """

    # Denoiser passes per step with guidance on (classifier-free: conditional + unconditional).
    passes_per_step: ClassVar[int] = 2
    # The step callback's tensors this family needs kept (none: the default).
    step_tensors: ClassVar[tuple[str, ...]] = ("latents",)

    def __init__(self, pipe: Any, spec: FamilySpec) -> None:
        self.pipe, self.spec = pipe, spec
        self.vae = pipe.vae

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        profile: ProfileHook | None = None,
    ) -> FamilyPipeline:
        """The directory's pipeline with its own diffusers class, on ``device`` in ``dtype``;
        then ``profile`` (if any) applied to it. Raises
        :class:`animfleet.families.UnknownFamily` for a class no family serves."""
        spec = read_spec(model_dir)
        diffusers_logging.disable_progress_bar()
        diffusers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_error()
        pipeline_class = getattr(diffusers, spec.pipeline_class)
        pipe = pipeline_class.from_pretrained(str(model_dir), dtype=dtype)
        pipe.set_progress_bar_config(disable=True)
        if device != "cpu":
            pipe.to(device)
        loaded = cls(pipe, spec)
        if profile is not None:
            profile(loaded)
        return loaded

    @property
    def denoiser(self) -> torch.nn.Module:
        """The network run every step (a transformer; SVD's U-Net)."""
        module: torch.nn.Module = getattr(self.pipe, "transformer", None) or self.pipe.unet
        return module

    @property
    def size_multiple(self) -> int:
        return self.spec.size_multiple

    @property
    def device(self) -> torch.device:
        return torch.device(self.pipe._execution_device)

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        self.pipe.set_progress_bar_config(**kwargs)

    def describe(self) -> dict[str, Any]:
        """Sizes worth logging when a worker loads the model."""
        return {
            "family": self.spec.family,
            "pipeline_class": self.spec.pipeline_class,
            "denoiser_params": sum(p.numel() for p in self.denoiser.parameters()),
            "vae_params": sum(p.numel() for p in self.vae.parameters()),
            "dtype": str(self.denoiser.dtype),
        }

    def call_kwargs(self, image: Image.Image, params: GenerationParams) -> dict[str, Any]:
        """The family's own arguments for one job (besides size, frames, steps, generator)."""
        raise NotImplementedError

    def __call__(
        self,
        image: npt.NDArray[np.uint8],
        params: GenerationParams,
        on_step: StepCallback | None = None,
        **_: Any,
    ) -> npt.NDArray[np.uint8]:
        """Frames (T, H, W, 3 uint8) of one job on a fitted image (its sides multiples of the
        family's); ``on_step(done, total)`` after every denoising step."""
        check_size(image, self.size_multiple)
        height, width = image.shape[:2]
        steps = params.num_inference_steps

        def step_end(_: Any, index: int, __: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            if on_step is not None:
                on_step(index + 1, steps)
            return tensors

        kwargs = self.call_kwargs(Image.fromarray(image), params)
        with torch.inference_mode():
            output = self.pipe(
                height=height,
                width=width,
                num_frames=params.num_frames,
                num_inference_steps=steps,
                generator=torch.Generator().manual_seed(params.seed),
                output_type="np",
                callback_on_step_end=step_end,
                callback_on_step_end_tensor_inputs=list(self.step_tensors),
                **kwargs,
            )
        frames = np.asarray(output.frames[0], dtype=np.float32)
        result: npt.NDArray[np.uint8] = (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)
        return result
