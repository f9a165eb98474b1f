"""``make bench-brush``: a brushed 512 px video against an unbrushed one, interleaved rounds.

One worker :class:`Animator` (the shipped student as its serving file says, eager, with the
edge fill) animates a held-out photograph (scikit-learn's ``china.jpg``) at 512 px, 8 frames,
prompt "still": unbrushed and brushed with two regions (``flow`` and ``drift``, as ``animfleet
eval --brush`` draws them) as a loop, both cold (template cache cleared: a new photograph, its
frame, features and, brushed, motion fields and trajectories built afresh); and the brushed
job again with everything served by the template cache. A video is the worker's whole job
after the image is fetched: decode and fit, the model at its working size, rendering (with
the brush), the MP4 encode. Each round runs the three in a shuffled order, so each sees the
same machine load; medians of wall and CPU time.

The bar: the brushed video (cold) costs at most 2x the unbrushed one.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import time
from collections import defaultdict

import torch
from PIL import Image

from animfleet.brush import region_input
from animfleet.jobs import JobParams
from tools.training.data.photos import photo_uint8
from tools.training.evaluation.brush_eval import brushed_regions, png, served_animator, square
from workers.encode import encode_mp4

BAR = 2.0
SIZE = 512


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("ANIMFLEET_TORCH_THREADS", "0")) or 1)
    animator = served_animator()
    photo = square(photo_uint8("china"))
    buffer = io.BytesIO()
    Image.fromarray(photo).save(buffer, format="JPEG", quality=95)
    image = buffer.getvalue()
    regions = brushed_regions(2, photo)["flow+drift loop"]
    inputs = {region_input(i): png(mask) for i, (_, mask) in enumerate(regions)}
    plain = JobParams(prompt="still", frames=args.frames, fps=8, width=SIZE, height=SIZE, seed=0)
    brushed = plain.model_copy(update={"regions": tuple(u for u, _ in regions), "loop": True})

    def job(kind: str) -> tuple[float, float]:
        if kind != "brushed (cached)":
            animator.templates.clear()
        params, extra = (plain, {}) if kind == "unbrushed" else (brushed, {"inputs": inputs})
        wall, cpu = time.perf_counter(), time.process_time()
        frames = animator.animate(image, params, **extra)
        encode_mp4(frames, 8)
        return time.perf_counter() - wall, time.process_time() - cpu

    kinds = ("unbrushed", "brushed (cold)", "brushed (cached)")  # the first two cold
    for kind in kinds:  # warm-up: first calls allocate and pick kernels
        job(kind)
    walls: dict[str, list[float]] = defaultdict(list)
    cpus: dict[str, list[float]] = defaultdict(list)
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            wall, cpu = job(kind)
            walls[kind].append(wall)
            cpus[kind].append(cpu)
    base_wall, base_cpu = (
        statistics.median(walls["unbrushed"]),
        statistics.median(cpus["unbrushed"]),
    )
    print(
        f"{SIZE} px, {args.frames} frames, {args.rounds} interleaved rounds, torch threads "
        f"{torch.get_num_threads()}, model {animator.model_dir} ({animator.variant.steps} steps)"
    )
    print(f"{'job':<18} {'wall s':>8} {'x':>6} {'cpu s':>8} {'x':>6}")
    for kind in kinds:
        wall, cpu = statistics.median(walls[kind]), statistics.median(cpus[kind])
        print(
            f"{kind:<18} {wall:>8.2f} {wall / base_wall:>6.2f} {cpu:>8.2f} {cpu / base_cpu:>6.2f}"
        )
    ratio = statistics.median(walls["brushed (cold)"]) / base_wall
    ok = ratio <= BAR
    print(
        f"{'PASS' if ok else 'FAIL'} a brushed 512 px video costs {ratio:.2f}x an unbrushed "
        f"one (both cold), wall medians (bar <= {BAR}x)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
