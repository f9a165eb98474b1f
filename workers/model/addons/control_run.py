"""Running a control branch beside the job instead of before it.

A job's control residuals depend on its control image alone, so they are computed once per
job (not once per denoising step, as a ControlNet conditioned on the timestep would be), and
nothing needs them until the U-Net's first call reaches its bottleneck: the image's decode,
the branch's convolutions and the job's own conditioning (VAE encode, image and text
encoders) and first U-Net blocks can run at the same time.

- On a GPU the branch is queued on a side CUDA stream; the hooks' first use makes the main
  stream wait for it (an event, no host sync).
- On a CPU it can run on a background thread (torch's kernels release the GIL); the hooks'
  first use waits for the thread. ``torch.jit.fork`` would not do here: on eager code it runs
  the function inline. It only pays where a core is idle; the default on a CPU is serial.
- Serially (``concurrent=False``) it runs at once, in the caller's thread and stream.

Every way computes the same tensors with the same kernels: outputs are equal (tested, and
checked by ``make bench-control``).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from workers.model.addons.control_branch import (
    ControlEncoder,
    Pending,
    Ready,
    Residuals,
    control_pixels,
)


def concurrency_pays(device: str) -> bool:
    """Whether to run a branch beside the job by default: on a GPU (a side stream costs a
    launch and an event). Not on a CPU: there the branch is about 2 ms once per job, and
    handing it to a thread cost more than it hid (``make bench-control`` on a shared
    2-core machine: concurrent 1.09x the base job, serial 1.02x)."""
    return device.startswith("cuda")


def compute(encoder: ControlEncoder, image: bytes, width: int, height: int) -> Residuals:
    """The residuals of one control image for a ``width`` x ``height`` job, here and now."""
    parameter = next(encoder.parameters())
    pixels = control_pixels(image, width, height).to(parameter.device, parameter.dtype)
    return run_branch(encoder, pixels)


def run_branch(encoder: ControlEncoder, pixels: torch.Tensor) -> Residuals:
    """The branch on a decoded control image (:func:`control_pixels`, on its device)."""
    with torch.inference_mode():
        mid, motion = encoder(pixels)
    return Residuals(mid, motion)


@dataclass(frozen=True)
class _Threaded:
    future: Future[Residuals]

    def wait(self) -> Residuals:
        return self.future.result()


@dataclass(frozen=True)
class _Streamed:
    residuals: Residuals
    done: torch.cuda.Event

    def wait(self) -> Residuals:
        torch.cuda.current_stream().wait_event(self.done)
        return self.residuals


class BranchRunner:
    """Starts control branches for jobs, beside them or serially."""

    def __init__(self, device: str = "cpu", concurrent: bool | None = None) -> None:
        """``concurrent``: None picks :func:`concurrency_pays` for ``device``."""
        self.device = device
        self.concurrent = concurrency_pays(device) if concurrent is None else concurrent
        self._pool: ThreadPoolExecutor | None = None
        self._stream: torch.cuda.Stream | None = None

    def start(self, encoder: ControlEncoder, image: bytes, width: int, height: int) -> Pending:
        """Begin computing ``image``'s residuals; the returned handle's ``wait`` gives them."""
        if not self.concurrent:
            return Ready(compute(encoder, image, width, height))
        if self.device.startswith("cuda"):
            return self._on_stream(encoder, image, width, height)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="control-branch")
        return _Threaded(self._pool.submit(compute, encoder, image, width, height))

    def _on_stream(self, encoder: ControlEncoder, image: bytes, width: int, height: int) -> Pending:
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        main = torch.cuda.current_stream()
        self._stream.wait_stream(main)  # the encoder's weights are ready on the main stream
        with torch.cuda.stream(self._stream):
            residuals = compute(encoder, image, width, height)
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record(self._stream)
        for tensor in (residuals.mid, residuals.motion):
            tensor.record_stream(main)  # freed only after the main stream used them
        return _Streamed(residuals, done)

    def close(self) -> None:
        """Stop the background thread (a running branch finishes first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
