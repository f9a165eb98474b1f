"""Serving a real Stable Video Diffusion checkpoint through diffusers' own pipeline class.

A directory whose ``model_index.json`` names ``StableVideoDiffusionPipeline`` is loaded with that
class: image-only conditioning (the prompt is not used) and two U-Net passes per step
(classifier-free guidance on the image, scale rising linearly over the frames from 1 to the
variant's image scale). :class:`SVDAnimation` gives it the same call as ``AnimationPipeline``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from diffusers import StableVideoDiffusionPipeline
from PIL import Image

from workers.model.pipelines.animation import StepCallback, check_size
from workers.model.pipelines.generation import GenerationParams

SVD_CLASS = "StableVideoDiffusionPipeline"


def pipeline_class_name(model_dir: str | Path) -> str:
    """The ``_class_name`` a ``from_pretrained`` directory was saved with."""
    index = json.loads((Path(model_dir) / "model_index.json").read_text())
    return str(index.get("_class_name", ""))


class SVDAnimation:
    """A loaded ``StableVideoDiffusionPipeline`` behind ``AnimationPipeline``'s call."""

    passes_per_step = 2

    def __init__(self, pipe: StableVideoDiffusionPipeline) -> None:
        self.pipe = pipe
        self.unet = pipe.unet
        self.vae = pipe.vae

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, **kwargs: Any) -> SVDAnimation:
        return cls(StableVideoDiffusionPipeline.from_pretrained(str(model_dir), **kwargs))

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        self.pipe.set_progress_bar_config(**kwargs)

    @property
    def size_multiple(self) -> int:
        return int(self.pipe.vae_scale_factor)

    def __call__(
        self,
        image: npt.NDArray[np.uint8],
        params: GenerationParams,
        on_step: StepCallback | None = None,
    ) -> npt.NDArray[np.uint8]:
        """Frames (T, H, W, 3 uint8); the prompt and the text guidance scale are not used."""
        check_size(image, self.size_multiple)
        height, width = image.shape[:2]

        def step_end(_: Any, index: int, __: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            if on_step is not None:
                on_step(index + 1, params.num_inference_steps)
            return tensors

        with torch.inference_mode():
            frames = self.pipe(
                Image.fromarray(image),
                height=height,
                width=width,
                num_frames=params.num_frames,
                num_inference_steps=params.num_inference_steps,
                min_guidance_scale=1.0,
                max_guidance_scale=params.image_guidance_scale,
                fps=params.fps,
                decode_chunk_size=params.num_frames,
                generator=torch.Generator().manual_seed(params.seed),
                output_type="np",
                callback_on_step_end=step_end,
            ).frames[0]
        result: npt.NDArray[np.uint8] = (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)
        return result
