"""Step-level continuous batching: up to N jobs in one denoising loop, each at its own step.

One engine thread owns the U-Net. Each pass of its loop runs one denoising step for every job
in the batch: the jobs' rows are stacked into one U-Net call (per-sample timesteps, contexts,
guidance scales), and each job's slice of the output goes through that job's own scheduler. A
job that arrives joins at the next pass; one whose last step ran leaves at once, and its
decode, encode and upload happen in its own (task) thread while the others keep stepping.

The task thread that submitted a job waits on the job's event queue: it reports progress for
every step (the record update is where cancel and the deadline are seen), and tells the engine
to drop the job when that raises. A failure is per sample: non-finite latents fail that job
alone, and a U-Net call that raises is retried one sample at a time, so only the samples that
fail on their own fail.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog
import torch
from billiard.exceptions import SoftTimeLimitExceeded

from animfleet.jobs import JobParams
from workers.batching.sample import DONE, FAILED, STEP, GroupKey, Sample, batchable, prepare
from workers.model.animator import Animator, ModelError
from workers.model.imaging.mask import paste
from workers.model.networks.motion_unet import MotionUNet
from workers.model.pipelines.animation import StepCallback
from workers.model.pipelines.masked import crop_input
from workers.model.pipelines.render import final_flow, render, split_clip, upscale

log = structlog.stdlib.get_logger("animfleet.worker.batching")


class BatchEngine:
    """Runs the denoising of up to ``capacity`` jobs at once; see the module docstring.

    :meth:`animate` is a drop-in for ``Animator.animate``, called from any number of threads.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.steps_run = 0  # U-Net calls, for tests and logs
        self.largest_batch = 0
        self._pending: queue.Queue[Sample | None] = queue.Queue()
        self._active: list[Sample] = []
        self._solo = threading.Lock()  # for models the engine cannot batch
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="batch-engine", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the loop; samples still in it fail as ``ModelError``."""
        self._stopped.set()
        self._pending.put(None)
        self._thread.join()

    # -- the caller's side -------------------------------------------------------------------
    def animate(
        self,
        animator: Animator,
        image: bytes,
        params: JobParams,
        on_step: StepCallback | None = None,
        time_limit_s: float | None = None,
        mask: bytes | None = None,
        inputs: Mapping[str, bytes] | None = None,
    ) -> npt.NDArray[np.uint8]:
        """Frames (T, H, W, 3 uint8) for one job, its denoising batched with the other jobs'.

        Raises :class:`ModelError` for a model failure of this job; whatever ``on_step``
        raises (a cancel, a deadline) drops the job from the batch and propagates. Past
        ``time_limit_s`` the job leaves the batch with ``SoftTimeLimitExceeded``, as a
        prefork worker's soft time limit would end it. With ``mask`` the job's sample is the
        mask's box (its own group), pasted back into the input
        (:mod:`workers.model.pipelines.masked`).
        """
        extra: dict[str, Any] = {"mask": mask} if mask is not None else {}
        if inputs:
            extra["inputs"] = inputs
        # A stand-in, an SVD checkpoint, a brushed job (rendered with its regions' motion):
        # one at a time.
        if not batchable(animator) or params.regions:
            with self._solo:
                frames: npt.NDArray[np.uint8] = animator.animate(image, params, on_step, **extra)
            return frames
        until = None if time_limit_s is None else time.monotonic() + time_limit_s
        try:
            # Checks (and loads) the add-ons before any step, without entering the context:
            # only the engine thread may switch the U-Net's branches, around its own calls.
            animator._addons_active(params, inputs)
            box = crop_input(animator, image, mask, params) if mask is not None else None
            sample = prepare(animator, image, params, **({"box": box} if box else {}))
            sample.inputs = dict(inputs or {})
        except ModelError:
            raise
        except (RuntimeError, ValueError) as error:
            raise ModelError(f"{type(error).__name__}: {error}") from error
        self._pending.put(sample)
        try:
            latents, flow = self._wait(sample, on_step, until)
        except BaseException:
            sample.canceled.set()  # the engine drops it before its next step
            raise
        try:
            frames = _frames(sample, latents, flow)
            return frames if box is None else paste(frames, box.frame, box.region)
        except (RuntimeError, ValueError) as error:
            raise ModelError(f"{type(error).__name__}: {error}") from error

    def _wait(
        self, sample: Sample, on_step: StepCallback | None, until: float | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The sample's clean latents, and the clip's flow when it is rendered."""
        while True:
            timeout = None if until is None else until - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise SoftTimeLimitExceeded()
            try:
                kind, value = sample.events.get(timeout=timeout)
            except queue.Empty:
                continue
            if kind == STEP:
                if on_step is not None:
                    on_step(*value)
            elif kind == DONE:
                done: tuple[torch.Tensor, torch.Tensor | None] = value
                return done
            elif kind == FAILED:
                raise ModelError(str(value))

    # -- the engine thread -------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._admit()
            self._active = [s for s in self._active if not s.canceled.is_set()]
            if not self._active:
                continue
            groups: dict[GroupKey, list[Sample]] = {}
            for sample in self._active:
                groups.setdefault(sample.key, []).append(sample)
            for members in groups.values():
                self._step(members)
            self._active = [s for s in self._active if not (s.finished or s.canceled.is_set())]
        for sample in self._active:
            sample.events.put((FAILED, "the worker is shutting down"))

    def _admit(self) -> None:
        """Take waiting jobs into the batch (blocking only while it is empty)."""
        block = not self._active
        while len(self._active) < self.capacity:
            try:
                sample = self._pending.get(block=block)
            except queue.Empty:
                return
            if sample is None:  # close()
                return
            block = False
            if not sample.canceled.is_set():
                self._active.append(sample)

    def _step(self, members: list[Sample]) -> None:
        """One denoising step for each of ``members`` (one group) in one U-Net call; a call
        that raises is retried per sample so that only the sample at fault fails."""
        try:
            outputs = self._forward(members)
        except Exception as error:
            if len(members) == 1:
                self._fail(members[0], error)
                return
            log.warning("batch.step_failed_retrying_alone", size=len(members), error=str(error))
            for sample in members:
                self._step([sample])
            return
        self.steps_run += 1
        self.largest_batch = max(self.largest_batch, len(members))
        for sample, out in zip(members, outputs, strict=True):
            try:
                with torch.inference_mode():
                    sample.advance(out)
                if not bool(torch.isfinite(sample.latents).all()):
                    raise ValueError("the denoiser produced non-finite latents (NaN or inf)")
            except Exception as error:
                self._fail(sample, error)
                continue
            if sample.finished:
                try:
                    flow = self._render_flow(sample)
                except Exception as error:
                    self._fail(sample, error)
                    continue
                sample.events.put((STEP, (sample.index, sample.total)))
                sample.events.put((DONE, (sample.latents, flow)))
            else:
                sample.events.put((STEP, (sample.index, sample.total)))

    def _forward(self, members: list[Sample]) -> list[torch.Tensor]:
        """The U-Net's output for each of ``members``' current step, (passes, F, C, h, w)."""
        first = members[0]
        pipe, passes, size = first.pipeline, first.conditions.passes, len(members)
        extra: dict[str, Any] = {}
        with torch.inference_mode(), first.animator._kernels(), self._addons(first):
            # Rows pass-major, as the pipeline lays them out: row p * size + b is sample b's
            # pass p, so a teacher's three passes of each sample stay ``chunk(3)`` apart.
            model_in = _pass_major([s.model_input() for s in members])
            timesteps = torch.stack([s.timestep for s in members]).repeat(passes)
            context = _pass_major([s.conditions.context for s in members])
            time_ids = _pass_major([s.conditions.time_ids for s in members])
            if pipe.guidance_distilled:
                scales = torch.cat([s.guidance for s in members])
                extra["guidance_scale"] = scales.to(pipe.unet.dtype)
            out = pipe.unet(
                model_in,
                timesteps,
                encoder_hidden_states=context,
                added_time_ids=time_ids,
                **extra,
            ).sample.float()
        return list(out.unflatten(0, (passes, size)).unbind(1))

    def _render_flow(self, sample: Sample) -> torch.Tensor | None:
        """A rendered job's flow, from the engine thread (the only one that may switch
        the
        U-Net's add-on branches): the pass :func:`~workers.model.pipelines.render.predict` makes
        after
        its loop, with the job's own scheduler. None when the job is not rendered, or its U-Net
        predicts no flow (its frames are upscaled, as alone)."""
        if sample.full is None or not isinstance(sample.pipeline.unet, MotionUNet):
            return None
        with torch.inference_mode(), sample.animator._kernels(), self._addons(sample):
            pipe, conditions = sample.pipeline, sample.conditions
            return final_flow(pipe, sample.latents, conditions, sample.guidance, sample.scheduler)

    @staticmethod
    def _addons(sample: Sample) -> contextlib.AbstractContextManager[Any]:
        return sample.animator._addons_active(sample.params, sample.inputs)

    @staticmethod
    def _fail(sample: Sample, error: BaseException) -> None:
        sample.canceled.set()  # leaves the batch
        sample.events.put((FAILED, f"{type(error).__name__}: {error}"))


def _frames(
    sample: Sample, latents: torch.Tensor, flow: torch.Tensor | None
) -> npt.NDArray[np.uint8]:
    """A finished sample's frames, as ``Animator.run_frames`` makes them for the job alone."""
    with torch.inference_mode():
        if sample.full is not None and flow is not None:
            clip = split_clip(latents, sample.conditions, flow)
            return render(sample.full, clip)
        frames: npt.NDArray[np.uint8] = sample.pipeline.decode(latents, first_frame=sample.image)
    if sample.full is not None:  # no flow to render with: upscaled, as alone
        return upscale(frames, *sample.full.shape[:2])
    return frames


def _pass_major(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Per-sample (passes, ...) tensors as one (passes * samples, ...), pass-major."""
    return torch.stack(tensors, 1).flatten(0, 1)
