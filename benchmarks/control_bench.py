"""``make bench-control``: the image-conditioned add-on (``path``) served our way, serially and
beside the job, against the base job and against the naive way, in one interleaved run.

Per round, in a shuffled order, on the shipped student: the base job; the job with the
``path`` add-on and its control image, the branch held in memory and run once per job
serially, and the same beside the job (a thread on a CPU, a side stream on a GPU); and the
naive way, per request: read the branch from disk, and run it in series before every U-Net
call, as a ControlNet conditioned on the timestep is run. All three add-on arms must give
the same frames (checked), and the base job stays bit-identical to a model that never had
add-on machinery.

The bar (the add-on bar of ``make bench-addons``): ours <= 1.15x the base latency, and its
overhead >= 3x smaller than the naive one's; frames equal between the ways.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image

from animfleet.addons import AddonUse, control_input
from animfleet.jobs import JobParams
from benchmarks.addons_bench import MODEL, OVERHEAD_BAR, RATIO_BAR, pristine_frames, table
from tools.training.addons.control_data import path_sample
from tools.training.evaluation.frame_metrics import to_uint8
from workers.model.addons.control_branch import (
    ControlEncoder,
    Residuals,
    control_pixels,
    read_control,
)
from workers.model.addons.control_run import compute, run_branch
from workers.model.addons.store import addons_root
from workers.model.animator import Animator
from workers.model.runtime.loading import Variant
from workers.model.runtime.serving import load_serving

NAME = "path"


def png(array: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buffer, format="PNG")
    return buffer.getvalue()


class _EveryCall:
    """The naive way's pending residuals: the branch run afresh each time they are asked
    for (the control image decoded once)."""

    def __init__(self, encoder: ControlEncoder, image: bytes, width: int, height: int) -> None:
        parameter = next(encoder.parameters())
        self.encoder = encoder
        self.pixels = control_pixels(image, width, height).to(parameter.device, parameter.dtype)

    def wait(self) -> Residuals:
        return run_branch(self.encoder, self.pixels)


def naive_job(
    animator: Animator, image: bytes, params: JobParams, control: bytes
) -> np.ndarray[Any, Any]:
    """Read the branch from disk, then run it in series before every U-Net call."""
    assert animator.addons is not None and animator.addons._controls is not None
    hooks = animator.addons._controls
    dtype = animator.pipeline.unet.dtype
    encoder = read_control(addons_root(animator.model_dir) / NAME, NAME, MODEL.name, dtype)
    pending = _EveryCall(encoder, control, params.width, params.height)

    def afresh(module: torch.nn.Module, args: Any) -> None:
        hooks._residuals = None  # the hooks' first use in this call waits (computes) again

    handle = animator.pipeline.unet.register_forward_pre_hook(afresh)
    try:
        with hooks.activate([(pending, params.addons[0].scale)]):
            return animator.animate(image, params.model_copy(update={"addons": ()}))
    finally:
        handle.remove()


def isolated(
    animator: Animator, params: JobParams, control: bytes, steps: int, reps: int = 30
) -> tuple[float, float]:
    """The branch's own work per request, timed apart from the job: ours computes it once
    from memory; naive reads it from disk and computes it at each of the job's steps."""
    assert animator.addons is not None
    encoder = animator.addons.get(NAME).control
    assert encoder is not None
    dtype = animator.pipeline.unet.dtype
    ours, naive = [], []
    for _ in range(reps):
        started = time.perf_counter()
        compute(encoder, control, params.width, params.height)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        loaded = read_control(addons_root(animator.model_dir) / NAME, NAME, MODEL.name, dtype)
        every = _EveryCall(loaded, control, params.width, params.height)
        for _ in range(steps):
            every.wait()
        naive.append(time.perf_counter() - started)
    return statistics.median(ours), statistics.median(naive)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("ANIMFLEET_TORCH_THREADS", "0")) or 1)
    os.environ.setdefault("ANIMFLEET_TORCH_THREADS", str(torch.get_num_threads()))
    serving = load_serving(MODEL)
    variant = Variant(
        name=MODEL.name,
        steps=serving.steps or Variant.steps,
        image_guidance_scale=serving.image_guidance_scale,
        text_guidance_scale=serving.text_guidance_scale,
    )
    ours = Animator(MODEL, variant, device=args.device)
    if ours.addons is None or NAME not in ours.addons.with_image():
        print(f"no {NAME} add-on beside the model: run `make train-control` first")
        return 1
    for future in ours.addons.prefetch(ours.addons.names()):
        future.result()  # the boot-time prefetch, finished before the first job
    sample = path_sample(5, heldout=True, size=args.size)
    image = png(to_uint8(sample.video)[0])
    control = png((sample.control[0].numpy() * 255).round().astype(np.uint8))
    base = JobParams(
        prompt="still", frames=args.frames, fps=8, width=args.size, height=args.size, seed=0
    )
    digest = hashlib.sha256(control).hexdigest()
    with_path = base.model_copy(update={"addons": (AddonUse(name=NAME, image_sha256=digest),)})
    inputs = {control_input(NAME): control}
    runner = ours.addons.runner

    def ours_job(concurrent: bool) -> np.ndarray[Any, Any]:
        runner.concurrent = concurrent
        return ours.animate(image, with_path, inputs=inputs)

    pristine = pristine_frames(image, base, variant)
    arms: dict[str, Callable[[], Any]] = {
        "base": lambda: ours.animate(image, base),
        "ours, serial": lambda: ours_job(False),
        "ours, concurrent": lambda: ours_job(True),
        "naive": lambda: naive_job(ours, image, with_path, control),
    }
    outputs = {name: run() for name, run in arms.items()}  # warm-up, and the frames compared
    times: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    order = random.Random(0)
    for _ in range(args.rounds):
        order.shuffle(names)
        for name in names:
            started = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - started)
    after = ours.animate(image, base)
    branch = isolated(ours, with_path, control, variant.steps or 8)
    return report(times, outputs, branch, pristine, after, args)


def report(
    times: dict[str, list[float]],
    outputs: dict[str, np.ndarray[Any, Any]],
    branch: tuple[float, float],
    pristine: np.ndarray[Any, Any],
    after: np.ndarray[Any, Any],
    args: argparse.Namespace,
) -> int:
    print(
        f"control add-on {NAME!r}, {args.frames}x{args.size}x{args.size}, device {args.device}, "
        f"{args.rounds} interleaved rounds, {torch.get_num_threads()} intra-op thread(s), "
        f"{os.cpu_count()} cores; medians"
    )
    median = table(times)
    base = median["base"]
    verdicts = []
    same = all(
        np.array_equal(outputs["ours, serial"], outputs[name])
        for name in ("ours, concurrent", "naive")
    )
    verdicts.append(same)
    print(f"frames equal, serial = concurrent = naive: {same} {'PASS' if same else 'FAIL'}")
    moved = not np.array_equal(outputs["ours, serial"], outputs["base"])
    print(f"(the add-on changes the frames: {moved})")
    best = min(median["ours, serial"], median["ours, concurrent"])
    ratio = best / base
    verdicts.append(ratio <= RATIO_BAR)
    print(f"ours {ratio:.3f}x base (bar <= {RATIO_BAR}) {'PASS' if ratio <= RATIO_BAR else 'FAIL'}")
    ours_s, naive_s = branch
    smaller = naive_s / max(ours_s, 1e-9)
    verdicts.append(smaller >= OVERHEAD_BAR)
    print(
        f"branch work per request (isolated, medians of 30): ours {ours_s * 1000:.2f} ms once "
        f"vs naive {naive_s * 1000:.2f} ms (load + every step) = {smaller:.1f}x smaller "
        f"(bar >= {OVERHEAD_BAR}) {'PASS' if smaller >= OVERHEAD_BAR else 'FAIL'}"
    )
    cost = median["ours, concurrent"] - median["ours, serial"]
    print(
        f"concurrent / serial: {median['ours, concurrent'] / median['ours, serial']:.3f}x "
        f"(running the branch beside the job: {cost * 1000:+.1f} ms per job)"
    )
    identical = bool(np.array_equal(pristine, after))
    verdicts.append(identical)
    print(
        "base job bit-identical to a model without add-on machinery, after control jobs: "
        f"{identical} {'PASS' if identical else 'FAIL'}"
    )
    print("RESULT", "PASS" if all(verdicts) else "FAIL")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
