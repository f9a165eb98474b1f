"""What one generation asks of a pipeline besides its image, in one value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from animfleet.jobs import JobParams


class Served(Protocol):
    """What a job runs with besides its own parameters (the worker's ``Variant``)."""

    @property
    def steps(self) -> int: ...
    @property
    def image_guidance_scale(self) -> float: ...
    @property
    def text_guidance_scale(self) -> float: ...


@dataclass(frozen=True)
class GenerationParams:
    """The prompt, the clip's length and frame rate, the sampler's steps, the two guidance
    scales (image, text) and the noise seed: the same for every pipeline that animates. A
    generative family also reads the negative prompt, the job's own guidance scale (None: the
    family's default) and whether the last frame is conditioned to equal the first (loop)."""

    prompt: str
    num_frames: int
    fps: int
    num_inference_steps: int = 8
    image_guidance_scale: float = 1.5
    text_guidance_scale: float = 3.0
    seed: int = 0
    negative_prompt: str = ""
    guidance_scale: float | None = None
    loop: bool = False

    @classmethod
    def for_job(cls, job: JobParams, served: Served) -> GenerationParams:
        """A job's generation: its own prompt, length, rate, seed and steps (when it asks),
        the served variant's step count and guidance otherwise."""
        return cls(
            prompt=job.prompt,
            num_frames=job.frames,
            fps=job.fps,
            num_inference_steps=job.steps or served.steps,
            image_guidance_scale=served.image_guidance_scale,
            text_guidance_scale=served.text_guidance_scale,
            seed=job.seed,
            negative_prompt=job.negative_prompt or "",
            guidance_scale=job.guidance,
            loop=job.loop,
        )

    def guidance(self, device: torch.device | str) -> torch.Tensor:
        """The scales as the denoiser takes them: (1, 2), image then text."""
        return torch.tensor([[self.image_guidance_scale, self.text_guidance_scale]], device=device)
