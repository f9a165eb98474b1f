"""One job's place in a batched denoising loop: its conditions, noise and own scheduler.

Everything that makes a job's frames what they are when it runs alone lives here, per sample:
the conditioning from its image and prompt, the noise from its seed, its guidance scales, its
step count and a scheduler instance of its own (DPM-Solver++ is multistep: it keeps the model
outputs of earlier steps, so samples at different steps cannot share one). The engine only
stacks the samples' U-Net inputs into one call and hands each its slice of the output back.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from animfleet.jobs import JobParams
from workers.model.animator import Animator
from workers.model.pipelines.animation import AnimationPipeline, Conditions
from workers.model.pipelines.generation import GenerationParams
from workers.model.pipelines.masked import CropInput
from workers.model.pipelines.render import downsample, renders, working_size
from workers.model.runtime.loading import prepare_image

# Events a sample posts to the thread waiting for it (see BatchEngine.animate).
STEP, DONE, FAILED = "step", "done", "failed"


@dataclass(frozen=True)
class GroupKey:
    """Samples that can share one U-Net call: the same loaded model, the same latent shape and
    number of guidance passes, and the same add-ons (they act on the whole U-Net)."""

    model: int  # id() of the animator
    shape: tuple[int, ...]
    passes: int
    addons: tuple[tuple[str, float, str], ...]  # name, scale, control image's SHA-256


@dataclass(eq=False)
class Sample:
    """A job in the loop; ``index`` is the next step to run (0 .. ``total``)."""

    animator: Animator
    params: JobParams
    conditions: Conditions
    guidance: torch.Tensor  # (1, 2): image, text
    scheduler: Any
    latents: torch.Tensor  # (1, F, C, h, w) fp32
    index: int = 0
    events: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)
    canceled: threading.Event = field(default_factory=threading.Event)
    inputs: Mapping[str, bytes] = field(default_factory=dict)  # add-ons' control images
    image: npt.NDArray[np.uint8] | None = None  # the fitted input: frame 0 of the output
    # Above the working size: the input at the size the frames are rendered at (the model ran
    # on ``image``, the input brought down to the working size), as a job alone would be.
    full: npt.NDArray[np.uint8] | None = None

    @property
    def pipeline(self) -> AnimationPipeline:
        pipe: AnimationPipeline = self.animator.pipeline
        return pipe

    @property
    def total(self) -> int:
        return len(self.scheduler.timesteps)

    @property
    def timestep(self) -> torch.Tensor:
        t: torch.Tensor = self.scheduler.timesteps[self.index]
        return t

    @property
    def key(self) -> GroupKey:
        uses = tuple((u.name, u.scale, u.image_sha256 or "") for u in self.params.addons)
        shape = tuple(self.latents.shape[1:])
        return GroupKey(id(self.animator), shape, self.conditions.passes, uses)

    def model_input(self) -> torch.Tensor:
        """This sample's U-Net rows for its current step, (passes, F, 2C, h, w)."""
        scaled = self.scheduler.scale_model_input(self.latents, self.timestep)
        rows = scaled.repeat(self.conditions.passes, 1, 1, 1, 1).to(self.pipeline.unet.dtype)
        return torch.cat([rows, self.conditions.latents], dim=2)

    def advance(self, out: torch.Tensor) -> None:
        """Take this sample's U-Net output (passes, F, C, h, w) through its own scheduler, as
        ``AnimationPipeline.denoise`` does for a batch of one."""
        if self.conditions.passes == 3:
            scales = self.guidance.float().view(-1, 2, 1, 1, 1, 1)
            eps_u, eps_img, eps_full = out.chunk(3)
            out = eps_u + scales[:, 0] * (eps_img - eps_u) + scales[:, 1] * (eps_full - eps_img)
        self.latents = self.scheduler.step(out, self.timestep, self.latents).prev_sample
        self.index += 1

    @property
    def finished(self) -> bool:
        return self.index >= self.total


def prepare(
    animator: Animator, image: bytes, params: JobParams, box: CropInput | None = None
) -> Sample:
    """Everything a job needs before its first step, computed in the caller's thread (the
    image and text encoders, not the U-Net): exactly what ``AnimationPipeline.__call__`` does
    before its loop. Raises ValueError or RuntimeError as that would. ``box``: a masked job's
    crop (and its cached features), which the model runs on instead of the whole frame."""
    pipe: AnimationPipeline = animator.pipeline
    pixels_np = prepare_image(image, params.width, params.height) if box is None else box.crop
    full = None
    if renders(*pixels_np.shape[:2]):  # as Animator.run_frames: the U-Net at the working size
        full, pixels_np = pixels_np, downsample(pixels_np, *working_size(*pixels_np.shape[:2]))
    generation = GenerationParams.for_job(params, animator.variant)
    with torch.inference_mode():
        # Cached features are the box's at its own size; a rendered job conditions on the
        # working-size image, as it does alone.
        features = box.features if box is not None and full is None else None
        noise, conditions, guidance = pipe.prepare(pixels_np, generation, features)
        # A fresh instance on the pipeline's own config: the same schedule, its own history.
        scheduler = type(pipe.scheduler).from_config(pipe.scheduler.config)
        scheduler.set_timesteps(generation.num_inference_steps, device=noise.device)
        latents = noise.float() * scheduler.init_noise_sigma
    return Sample(
        animator, params, conditions, guidance, scheduler, latents, image=pixels_np, full=full
    )


def batchable(animator: Animator) -> bool:
    """Whether the engine can step this animator's samples together: an
    :class:`AnimationPipeline` without per-call state in its U-Net (block caching keeps the
    previous call's deep features, compiled graphs were traced for a batch of one)."""
    return (
        isinstance(getattr(animator, "pipeline", None), AnimationPipeline)
        and getattr(animator, "block_cache", None) is None
        and getattr(animator, "compiled", None) is None
    )
