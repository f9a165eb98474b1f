"""`make bench-model`: the served models, from the plain teacher to what the worker serves.

Rows are measured in one run, interleaved (:mod:`tools.serving.measure`: each configuration
loaded in its own process, then the timed videos round-robin over all of them), one torch
thread each, through the worker's own ``Animator``; the median of ``--repeats`` videos is
reported. ``PSNR vs fp32 eager`` compares a row's frames with the fp32, eager, stock-attention
run of the same model, sampler and steps, so it isolates the row's numerics; below the floor
the row says FAIL. ``vs baseline`` compares with the baseline row's frames (distillation and
sampler error included).

Sections: the shipped teacher and students (8 and 4 steps, fp32 and bf16 eager), ending at the
served default loaded as a worker loads it (its serving profile's entry for this device, or one
measured at boot; AOT packages when built), with which entry served and why; the teacher, the
served model's fp32 eager and the served default again at ``--large`` px (the U-Net at its
working size, rendered up); the bar (>= 20x the fp32 eager DDIM 32x3 teacher at 64 px, >= 10x
at 512 px, >= 40 dB against fp32 eager of the same model) with PASS/FAIL; block caching, not
served; and a random-weight SVD-style model (diffusers' ``UNetSpatioTemporalConditionModel``,
the class that serves a real SVD checkpoint) with its precision, de-dup and compile rows.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from animfleet.shipped_models import (
    SHIPPED_SLIM_DIR,
    SHIPPED_STUDENT_DIR,
    SHIPPED_TEACHER_DIR,
    shipped_model,
)
from benchmarks.attention_bench import attention_report, unet_flops
from benchmarks.shapes import save_bench_model
from tools.serving.measure import Config, Result, measure
from tools.serving.tune import base_variant
from workers.model.runtime.loading import ShapeBucket
from workers.model.runtime.profile import psnr


@dataclass(frozen=True)
class Row:
    config: Config
    reference: str  # label of the fp32 eager row of the same model, sampler and steps
    passes: int


DEVICE = "cpu"  # --device


def _config(label: str, model: Path, steps: int, **changes: object) -> Config:
    compile_ = bool(changes.pop("compile", False))
    aot = bool(changes.pop("aot", False))
    changes.setdefault("precision", "fp32")
    variant = replace(base_variant(model, steps), **changes)  # type: ignore[arg-type]
    return Config(label, model, variant, compile_, aot, DEVICE)


def _name(model: Path) -> str:
    return (
        model.name.removeprefix("animfleet-small-")
        if model.name != "animfleet-small"
        else "teacher"
    )


def served_rows(teacher: Path, students: list[Path], served: Path) -> tuple[list[Row], list[Row]]:
    """(cumulative rows ending at the served default as a worker serves it, variants not
    served). ``students``: the shipped students, each fp32 and bf16 eager at 8 steps (the
    distilled count) and 4; ``served``: the model a worker serves by default."""
    base = "baseline: teacher fp32 eager, DDIM 32x3"
    dpm = "teacher fp32 eager, DPM-Solver++ 15x3"
    cumulative = [
        Row(_config(base, teacher, 32, scheduler="ddim", context_dedup=False), base, 3),
        Row(_config(dpm, teacher, 15, context_dedup=False), dpm, 3),
        Row(_config("+ bf16 (the old default)", teacher, 15, precision="bf16"), dpm, 3),
    ]
    for model in students:
        for steps in (8, 4):
            ref = f"{_name(model)} {steps}x1 fp32 eager"
            bf16 = f"{_name(model)} {steps}x1 bf16 eager"
            cumulative += [
                Row(_config(ref, model, steps, context_dedup=False), ref, 1),
                Row(_config(bf16, model, steps, precision="bf16"), ref, 1),
            ]
    steps = base_variant(served).steps
    served_ref = f"{_name(served)} {steps}x1 fp32 eager"
    if all(row.config.label != served_ref for row in cumulative):
        cumulative.append(
            Row(_config(served_ref, served, steps, context_dedup=False), served_ref, 1)
        )
    cumulative.append(Row(_served_config(served, steps), served_ref, 1))
    student = students[0]
    ref = f"{_name(student)} 8x1 fp32 eager"
    variants = [
        Row(
            _config(f"{_name(student)} 8x1 fp32 + block cache /2", student, 8, block_cache=2),
            ref,
            1,
        ),
    ]
    return cumulative, variants


def _served_config(model: Path, steps: int) -> Config:
    """The served default, loaded as a worker loads it (its serving profile's entry for this
    device, or one measured at boot)."""
    config = _config(f"served default: {_name(model)}, loaded as a worker", model, steps)
    return replace(config, worker=True)


def svd_rows(model: Path) -> list[Row]:
    ref = "fp32 eager, stock attn, DPM-Solver++ 15x3"
    return [
        Row(_config(ref, model, 15, context_dedup=False), ref, 3),
        Row(_config("+ context de-dup", model, 15), ref, 3),
        Row(_config("+ bf16", model, 15, precision="bf16"), ref, 3),
        Row(_config("fp32, de-dup, torch.compile", model, 15, compile=True), ref, 3),
        Row(
            _config("bf16, de-dup, torch.compile", model, 15, precision="bf16", compile=True),
            ref,
            3,
        ),
    ]


def _quality(results: dict[str, Result], row: Row) -> float:
    """PSNR of the row's frames against its fp32 eager reference's."""
    frames, reference = results[row.config.label].frames, results[row.reference].frames
    assert frames is not None and reference is not None
    return psnr(frames, reference)


def table(rows: list[Row], results: dict[str, Result], baseline: Result, floor: float) -> str:
    lines = [
        f"{'configuration':<52} {'s/video':>8} {'speedup':>8} {'U-Net evals':>11} "
        f"{'ready s':>8} {'RSS MB':>7} {'PSNR vs fp32 eager':>19} {'vs baseline':>11}"
    ]
    for row in rows:
        result = results[row.config.label]
        quality = _quality(results, row)
        verdict = "  ok" if quality >= floor else "FAIL"
        assert baseline.frames is not None and result.frames is not None
        versus = (
            psnr(result.frames, baseline.frames)
            if result.frames.shape == baseline.frames.shape
            else math.nan
        )
        speedup = baseline.seconds / result.seconds
        lines.append(
            f"{row.config.label:<52} {result.seconds:>8.3f} {speedup:>7.1f}x "
            f"{row.config.variant.steps * row.passes:>11} {result.load_s + result.warmup_s:>8.1f} "
            f"{result.peak_rss_mb:>7.0f} {quality:>11.1f} dB {verdict} {versus:>8.1f} dB"
        )
    return "\n".join(lines)


def run(rows: list[Row], bucket: ShapeBucket, repeats: int, threads: int) -> dict[str, Result]:
    results = measure([row.config for row in rows], bucket, repeats, threads, print)
    return {result.config.label: result for result in results}


def served_section(
    bucket: ShapeBucket, large: ShapeBucket | None, repeats: int, threads: int, floor: float
) -> None:
    served = shipped_model()
    assert served is not None, "no shipped model: run from a source checkout"
    students = [
        m for m in (SHIPPED_STUDENT_DIR, SHIPPED_SLIM_DIR) if (m / "model_index.json").exists()
    ]
    cumulative, variants = served_rows(SHIPPED_TEACHER_DIR, students, served)
    results = run(cumulative + variants, bucket, repeats, threads)
    baseline = results[cumulative[0].config.label]
    names = ", ".join(m.name for m in [SHIPPED_TEACHER_DIR, *students])
    print(f"\nshipped models ({names}); served by default: {served.name}:")
    print(table(cumulative, results, baseline, floor))
    print("\nvariants, not served:")
    print(table(variants, results, baseline, floor))
    row = cumulative[-1]
    info = results[row.config.label].info
    runs = f"compiled: {', '.join(info['compiled'])}" if info.get("compiled") else "eagerly"
    print(
        f"\nserved default: {served.name}, {info.get('serving')}; from: "
        f"{info.get('serving_origin')} ({info.get('serving_source')}); runs {runs} "
        f"(AOT: {info.get('aot')})"
    )
    verdicts = [_verdict(bucket, results, baseline, row, 20.0, floor)]
    if large is not None:
        reference = next(r for r in cumulative if r.config.label == row.reference)
        teacher_large = _at(cumulative[0], large.height)
        reference_large = _at(reference, large.height)
        big = [teacher_large, reference_large, _at(row, large.height, reference_large)]
        print(
            f"\n{large.frames} frames at {large.height}x{large.width} "
            "(the U-Net at its working size, rendered up):"
        )
        large_results = run(big, large, repeats, threads)
        large_baseline = large_results[big[0].config.label]
        print(table(big, large_results, large_baseline, floor))
        verdicts.append(_verdict(large, large_results, large_baseline, big[2], 10.0, floor))
    print(
        "\nbar: served default vs the fp32 eager DDIM 32x3 teacher; "
        "PSNR vs fp32 eager of the same model:"
    )
    print("\n".join(verdicts))


def _at(row: Row, size: int, reference: Row | None = None) -> Row:
    """``row`` at another size, compared with ``reference`` (default: itself)."""
    label = f"{row.config.label}, {size} px"
    ref = f"{reference.config.label}" if reference else label
    return Row(replace(row.config, label=label), ref, row.passes)


def _verdict(
    bucket: ShapeBucket,
    results: dict[str, Result],
    baseline: Result,
    row: Row,
    bar: float,
    floor: float,
) -> str:
    served = results[row.config.label]
    speedup = baseline.seconds / served.seconds
    quality = _quality(results, row)
    fast, close = speedup >= bar, quality >= floor
    return (
        f"  {bucket.height} px: {speedup:.1f}x (>= {bar:g}x: {'PASS' if fast else 'FAIL'}), "
        f"{quality:.1f} dB (>= {floor:g} dB: {'PASS' if close else 'FAIL'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument(
        "--large", type=int, default=512, help="the rendered size of the second bar (0: skip it)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--floor-db", type=float, default=40.0)
    parser.add_argument("--no-svd", action="store_true", help="skip the SVD-style section")
    parser.add_argument("--no-served", action="store_true", help="only the SVD-style section")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU host")
    parser.add_argument(
        "--svd-model-dir", type=Path, default=Path(tempfile.gettempdir()) / "animfleet-bench-svd"
    )
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    bucket = ShapeBucket(args.frames, args.size, args.size)
    floor = args.floor_db
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{bucket.frames} frames of {bucket.height}x{bucket.width}, {args.threads} torch thread(s) "
        f"per configuration, median of {args.repeats} interleaved videos on {args.device}; "
        f"load average {load}"
    )
    if not args.no_served:
        large = ShapeBucket(args.frames, args.large, args.large) if args.large else None
        served_section(bucket, large, args.repeats, args.threads, floor)
    if not args.no_svd:
        model = save_bench_model(args.svd_model_dir)
        print(f"\nSVD-style random-weight model ({model}, UNetSpatioTemporalConditionModel):")
        flops = unet_flops(model, bucket)
        print(
            f"U-Net FLOPs per call (batch 3): stock {flops['stock'] / 1e9:.2f} GFLOP, de-dup "
            f"{flops['dedup'] / 1e9:.2f} GFLOP, saved {1 - flops['dedup'] / flops['stock']:.1%}"
        )
        print(attention_report(model, bucket))
        rows = svd_rows(model)
        svd = run(rows, bucket, args.repeats, args.threads)
        print(table(rows, svd, svd[rows[0].config.label], floor))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
