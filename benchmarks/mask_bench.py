"""``make bench-mask``: masked jobs against the unmasked job, by mask area, in one interleaved run.

On the shipped student, for masks drawn from the procedural scenes covering 10%, 25%, 50% and
100% of a 64x64 frame, from a 1024x1024 PNG upload (a photo-sized input, as clients send):

* per-video time of the unmasked job, of the masked job with a cold template cache, and of the
  same masked job again (a template-cache hit), interleaved round by round, medians of wall
  and of CPU time (the machine is shared: CPU time is the steadier measure of work). Two mask
  shapes: a disc (a compact region, as a brush stroke or a selection) and the scenes' shapes
  (circles, triangles, squares and stars at random angles, whose boxes are larger: the model
  runs on the mask's box, so a sprawling mask costs its box, not its area); and the template
  alone (decode, fit, mask region, box features: what a hit skips), built and looked up;
* the largest difference and PSNR of every unmasked pixel, over all frames, against the input
  the worker fitted (the bar: exact, or >= 50 dB), and that a hit gives the miss's frames;
* motion accuracy inside the mask on held-out scenes (the fully animated pixels, classified in
  the mask's box): the bar is 90%.

Time bars (on the disc masks, wall time): at 25% the masked job <= 0.6x the unmasked one, and
a cache hit lower still.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from animfleet.jobs import JobParams
from tools.training.data.motions import FAMILIES
from tools.training.data.scenes import heldout_sample
from tools.training.evaluation.mask_scenes import KINDS, classify_inside, mask_png, scene_mask
from workers.model.animator import Animator
from workers.model.imaging.mask import MaskRegion, mask_region
from workers.model.pipelines.masked import size_multiple
from workers.model.runtime.loading import prepare_image

MODEL = Path("models/animfleet-small-distilled")
AREAS = (0.10, 0.25, 0.50, 1.00)
UPLOAD_SIDE = 1024  # a photo-sized upload: decoding and fitting it is what a template saves
MOTION_SIDE = 256  # the motion clips' uploads: smaller, as only the frames' content counts there
PSNR_BAR_DB = 50.0
ACCURACY_BAR = 0.90
TIME_BAR = 0.60  # at 25%
Frames = npt.NDArray[np.uint8]


SHAPES = ("disc", "scene")


@dataclass
class AreaResult:
    """What one mask shape and area measured; times in seconds."""

    cold: list[float] = field(default_factory=list)
    hit: list[float] = field(default_factory=list)
    cold_cpu: list[float] = field(default_factory=list)
    build: list[float] = field(default_factory=list)  # the template alone: built, then looked up
    lookup: list[float] = field(default_factory=list)
    hit_cpu: list[float] = field(default_factory=list)
    coverage: list[float] = field(default_factory=list)
    box_share: list[float] = field(default_factory=list)
    max_diff: int = 0
    squared_error: float = 0.0
    outside_values: int = 0
    hit_equals_miss: bool = True
    correct: int = 0
    clips: int = 0

    @property
    def psnr(self) -> float:
        if self.squared_error == 0:
            return math.inf
        return 10 * math.log10(255.0**2 / (self.squared_error / self.outside_values))

    def check(self, frames: Frames, image: Frames, region: MaskRegion) -> None:
        """Count the unmasked pixels of every frame against the input."""
        outside = ~region.inside
        diff = frames[:, outside].astype(np.int64) - image[outside].astype(np.int64)
        if diff.size:
            self.max_diff = max(self.max_diff, int(np.abs(diff).max()))
        self.squared_error += float((diff**2).sum())
        self.outside_values += diff.size


def make_mask(shape: str, index: int, area: float, size: int) -> bytes:
    kind = KINDS.index("circle") if shape == "disc" else None
    return mask_png(scene_mask(index, area, size, kind))


def upload(family: str, index: int, side: int = UPLOAD_SIDE) -> tuple[bytes, str, Any]:
    """A held-out scene's first frame as a ``side`` x ``side`` PNG, its prompt and motion."""
    sample = heldout_sample(family, index, side, 1)
    pixels = ((sample.image.permute(1, 2, 0) + 1) * 127.5).round().byte().numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue(), sample.prompt, sample.motion


def timed(
    animator: Animator, image: bytes, params: JobParams, mask: bytes | None = None
) -> tuple[float, float, Frames]:
    """Wall seconds, CPU seconds (this process, every thread) and frames of one job."""
    started, cpu = time.perf_counter(), time.process_time()
    frames = animator.animate(image, params, mask=mask)
    return time.perf_counter() - started, time.process_time() - cpu, frames


def region_of(animator: Animator, mask: bytes, size: int) -> MaskRegion:
    return mask_region(mask, size, size, size_multiple(animator.pipeline))


Results = dict[tuple[str, float], AreaResult]


def measure_time(
    animator: Animator, results: Results, rounds: int, size: int
) -> tuple[list[float], list[float]]:
    """Interleaved rounds: the unmasked job, then per shape and area a cold masked job and a
    hit (the same job again)."""
    wall: list[float] = []
    cpu: list[float] = []
    for index in range(rounds):
        family = FAMILIES[index % 5]
        image, prompt, _ = upload(family, 100 + index)
        params = JobParams(prompt=prompt, frames=8, fps=8, width=size, height=size, seed=index)
        fitted = prepare_image(image, size, size)
        seconds, cpu_seconds, _ = timed(animator, image, params)
        wall.append(seconds)
        cpu.append(cpu_seconds)
        for (shape, area), result in results.items():
            mask = make_mask(shape, 1000 + index, area, size)
            region = region_of(animator, mask, size)
            animator.templates.clear()
            cold, cold_cpu, miss = timed(animator, image, params, mask)
            warm, warm_cpu, hit = timed(animator, image, params, mask)
            animator.templates.clear()
            started = time.perf_counter()
            animator.templates.get(image, size, size, mask)
            built = time.perf_counter()
            animator.templates.get(image, size, size, mask)
            result.build.append(built - started)
            result.lookup.append(time.perf_counter() - built)
            result.cold.append(cold)
            result.hit.append(warm)
            result.cold_cpu.append(cold_cpu)
            result.hit_cpu.append(warm_cpu)
            result.coverage.append(region.coverage)
            result.box_share.append(region.box.area / (size * size))
            result.hit_equals_miss &= bool(np.array_equal(miss, hit))
            result.check(miss, fitted, region)
            result.check(hit, fitted, region)
        print(f"  timing round {index + 1}/{rounds}", file=sys.stderr, flush=True)
    return wall, cpu


def measure_motion(animator: Animator, results: Results, per_family: int, size: int) -> None:
    """Held-out scenes, every family but static, each shape and area: motion inside the mask."""
    for family in FAMILIES:
        if family == "static":
            continue
        for index in range(per_family):
            image, prompt, motion = upload(family, index, MOTION_SIDE)
            params = JobParams(prompt=prompt, frames=8, fps=8, width=size, height=size, seed=index)
            fitted = prepare_image(image, size, size)
            for number, ((shape, area), result) in enumerate(results.items()):
                mask = make_mask(shape, index * 31 + number * 7 + len(family), area, size)
                region = region_of(animator, mask, size)
                frames = animator.animate(image, params, mask=mask)
                result.check(frames, fitted, region)
                result.correct += int(classify_inside(frames, region.alpha >= 1.0) is motion)
                result.clips += 1
        print(f"  motion: {family} done", file=sys.stderr, flush=True)


def report(
    wall: list[float], cpu: list[float], results: Results
) -> tuple[str, bool, dict[str, Any]]:
    base, base_cpu = statistics.median(wall), statistics.median(cpu)
    lines = [
        f"unmasked job: median {base * 1000:.0f} ms wall, {base_cpu * 1000:.0f} ms CPU "
        f"over {len(wall)} rounds",
        f"{'shape':<6} {'area':>5} {'mask':>6} {'box':>6} {'cold ms':>8} {'x':>5} {'hit ms':>7} "
        f"{'x':>5} {'cpu x':>5} {'hit':>5} {'tmpl ms':>7} {'max diff':>8} {'PSNR dB':>8} "
        f"{'hit=miss':>8} {'motion':>7}",
    ]
    table: dict[str, Any] = {"unmasked_s": base, "unmasked_cpu_s": base_cpu, "rows": []}
    for (shape, area), r in results.items():
        cold, hit = statistics.median(r.cold), statistics.median(r.hit)
        cold_cpu, hit_cpu = statistics.median(r.cold_cpu), statistics.median(r.hit_cpu)
        accuracy = r.correct / max(r.clips, 1)
        coverage, box = statistics.mean(r.coverage), statistics.mean(r.box_share)
        lines.append(
            f"{shape:<6} {area:>5.0%} {coverage:>6.1%} {box:>6.1%} {cold * 1000:>8.0f} "
            f"{cold / base:>5.2f} {hit * 1000:>7.0f} {hit / base:>5.2f} "
            f"{cold_cpu / base_cpu:>5.2f} {hit_cpu / base_cpu:>5.2f} "
            f"{statistics.median(r.build) * 1000:>7.1f} {r.max_diff:>8d} "
            f"{r.psnr:>8.1f} {r.hit_equals_miss!s:>8} {accuracy:>7.1%}"
        )
        table["rows"].append(
            {
                "shape": shape,
                "area": area,
                "mask_share": coverage,
                "box_share": box,
                "cold_s": cold,
                "cold_ratio": cold / base,
                "hit_s": hit,
                "hit_ratio": hit / base,
                "cold_cpu_ratio": cold_cpu / base_cpu,
                "hit_cpu_ratio": hit_cpu / base_cpu,
                "template_build_s": statistics.median(r.build),
                "template_lookup_s": statistics.median(r.lookup),
                "max_diff_outside": r.max_diff,
                "psnr_outside_db": r.psnr if math.isfinite(r.psnr) else "inf",
                "hit_equals_miss": r.hit_equals_miss,
                "motion_accuracy": accuracy,
                "motion_clips": r.clips,
            }
        )
    quarter = results[("disc", 0.25)]
    cold_q, hit_q = statistics.median(quarter.cold), statistics.median(quarter.hit)
    every = results.values()
    checks = [
        ("unmasked pixels exact or >= 50 dB, every row", all(r.psnr >= PSNR_BAR_DB for r in every)),
        (
            "motion accuracy inside the mask >= 90%, every row",
            all(r.correct >= ACCURACY_BAR * r.clips for r in every),
        ),
        (f"25% disc, cold cache: {cold_q / base:.2f}x <= 0.6x unmasked", cold_q <= TIME_BAR * base),
        (f"25% disc, cache hit: {hit_q / base:.2f}x < cold {cold_q / base:.2f}x", hit_q < cold_q),
        (
            "a cache hit gives the miss's frames exactly, every row",
            all(r.hit_equals_miss for r in every),
        ),
    ]
    lines += [f"{'PASS' if ok else 'FAIL'}: {name}" for name, ok in checks]
    table["checks"] = {name: ok for name, ok in checks}
    return "\n".join(lines), all(ok for _, ok in checks), table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--rounds", type=int, default=6, help="timing rounds")
    parser.add_argument("--per-family", type=int, default=4, help="held-out clips per family")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("out/bench-mask"))
    args = parser.parse_args(argv)
    os.environ.setdefault("ANIMFLEET_TORCH_THREADS", "1")
    animator = Animator(args.model)
    results: Results = {(shape, area): AreaResult() for shape in SHAPES for area in AREAS}
    started = time.perf_counter()
    wall, cpu = measure_time(animator, results, args.rounds, args.size)
    measure_motion(animator, results, args.per_family, args.size)
    text, passed, table = report(wall, cpu, results)
    text += f"\n({time.perf_counter() - started:.0f} s; model {args.model})"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.txt").write_text(text + "\n")
    (args.out / "report.json").write_text(json.dumps(table, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
