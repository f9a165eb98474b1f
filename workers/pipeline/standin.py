"""A model stand-in for load and fault tests: holds the worker like a real job, computes nothing.

Selected with ``ANIMFLEET_MODEL_DIR=standin:<seconds>[:<jitter>[:<workspace>]]``:
- ``seconds``: mean time a job holds the worker (what a GPU job costs, without the GPU);
- ``jitter``: relative spread, a job takes ``seconds * U(1 - jitter, 1 + jitter)`` (default 0.2);
- ``workspace``: bytes of working memory per frame-pixel (default 48), allocated and touched for
  the job's whole run, so memory grows with frames x height x width as a real model's
  activations do. A request far larger than the host can hold then trips the worker's memory
  guard (``ANIMFLEET_WORKER_MAX_RSS_MB``) every time: the CPU analogue of a GPU OOM.

The time is spent in ``steps`` slices with the step callback after each, so progress, cancel and
deadlines behave as with the real pipeline. The frames are the decoded input, shifted a little
per frame: small, valid video for the encoder and the storage path.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from animfleet.jobs import JobParams
from workers.pipeline.animation import StepCallback
from workers.pipeline.animator import Animator, ModelError, Variant, prepare_image

PREFIX = "standin:"
DEFAULT_JITTER = 0.2
DEFAULT_WORKSPACE_BYTES = 48
DEFAULT_STEPS = 8


def is_standin(model_dir: str | Path) -> bool:
    return str(model_dir).startswith(PREFIX)


class StandinAnimator(Animator):
    """An :class:`Animator` that sleeps instead of running a model (see the module docstring)."""

    def __init__(  # no super().__init__(): there is no pipeline to load
        self,
        seconds: float,
        jitter: float = DEFAULT_JITTER,
        workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
        steps: int = DEFAULT_STEPS,
    ) -> None:
        if seconds < 0 or not 0 <= jitter <= 1 or workspace_bytes < 0 or steps < 1:
            raise ValueError(
                f"stand-in needs seconds >= 0, 0 <= jitter <= 1, workspace >= 0, steps >= 1; "
                f"got {seconds}, {jitter}, {workspace_bytes}, {steps}"
            )
        self.seconds, self.jitter, self.workspace_bytes = seconds, jitter, workspace_bytes
        self.model_dir = Path(f"{PREFIX}{seconds}")
        self.variant = Variant(name="standin", steps=steps, passes_per_step=1)
        self.pipeline = None
        self.compiled = None
        self.load_time_s = 0.0
        self.warmup_time_s = 0.0
        self.info = {"model": str(self.model_dir), "jitter": jitter, "workspace": workspace_bytes}
        self.rng = random.Random()

    @classmethod
    def from_spec(cls, spec: str, steps: int = DEFAULT_STEPS) -> StandinAnimator:
        """``"standin:0.5"``, ``"standin:0.5:0.3"`` or ``"standin:0.5:0.3:64"``."""
        parts = spec.removeprefix(PREFIX).split(":")
        try:
            seconds = float(parts[0])
            jitter = float(parts[1]) if len(parts) > 1 else DEFAULT_JITTER
            workspace = int(parts[2]) if len(parts) > 2 else DEFAULT_WORKSPACE_BYTES
        except (ValueError, IndexError) as error:
            raise ValueError(
                f"model dir {spec!r}: expected standin:<seconds>[:<jitter>[:<workspace>]]"
            ) from error
        return cls(seconds, jitter, workspace, steps)

    def animate(
        self, image: bytes, params: JobParams, on_step: StepCallback | None = None
    ) -> npt.NDArray[np.uint8]:
        try:
            pixels = prepare_image(image, params.width, params.height)
        except (OSError, ValueError) as error:  # the real pipeline reports these the same way
            raise ModelError(f"{type(error).__name__}: {error}") from error
        size = self.workspace_bytes * params.frames * params.width * params.height
        workspace = np.ones(size, dtype=np.uint8) if size else None  # touched: resident
        steps = params.steps or self.variant.steps
        spread = self.rng.uniform(1 - self.jitter, 1 + self.jitter)
        for step in range(1, steps + 1):
            time.sleep(self.seconds * spread / steps)
            if on_step is not None:
                on_step(step, steps)
        del workspace
        shifts = [np.roll(pixels, index, axis=1) for index in range(params.frames)]
        return np.stack(shifts).astype(np.uint8)
