"""`make bench-families`: each family's serving profile on its tiny random-weight checkpoint.

Per family (``tools.families.tiny``, loaded through the worker's own adapter): the profile is
measured as a worker measures it at boot (:func:`workers.model.families.tune.tune`: options
axis by axis, candidates timed round-robin in this process, one torch thread, PSNR against
the fp32 eager reference), then the choice and fp32 eager are timed again head to head,
interleaved. Printed: the choice per family with seconds per video, the ratio and its PSNR;
every cache's denoiser calls and block ``Linear`` calls per video (the work it skipped) and
verdict; PASS/FAIL lines for the bar: the choice is never slower than fp32 eager, every
accepted option passed the floor, every cache that applied cut the block work.

Random weights: the tiny checkpoints' frames say whether an option keeps the numerics of
*these* weights, not whether a cache keeps the quality of a trained model; a deployment's
profile is measured on its own weights.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from animfleet.families import family_of, read_spec
from tools.families.tiny import build_tiny
from workers.model.families.profile import (
    REFERENCE,
    FamilyChoice,
    FamilyProfile,
    apply_choice,
    family_weights,
    scheduler_swaps,
)
from workers.model.families.registry import load_family
from workers.model.families.tune import Search, tune
from workers.model.pipelines.generation import GenerationParams
from workers.model.runtime.profile import PSNR_FLOOR_DB, device_key, psnr

CHECKPOINTS = ("svd", "ltx", "wan", "wan2.2", "cogvideox")
FRAMES, SIZE = 9, 32
BLOCKS = 4  # transformer blocks of each tiny checkpoint here (caches skip all but the first)
TOLERANCE = 1.05
AXIS_FIELDS = {
    "precision": "precision",
    "attention": "attention",
    "scheduler": "scheduler",
    "cache": "cache",
    "compile": "compile_blocks",
}  # "never slower": within timing noise of fp32 eager


@dataclass
class FamilyRun:
    name: str
    entry: FamilyProfile
    reference_s: float
    chosen_s: float
    chosen_psnr: float


def renderer(steps: int) -> Any:
    """One video of a loaded family adapter with fixed inputs (image, prompt, seed)."""
    rng = np.random.default_rng(0)
    image: npt.NDArray[np.uint8] = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    params = GenerationParams(
        prompt="a boat drifts on a calm lake", num_frames=FRAMES, fps=8, num_inference_steps=steps
    )

    def render(adapter: Any) -> npt.NDArray[np.uint8]:
        frames: npt.NDArray[np.uint8] = adapter(image, params)
        return frames

    return render


def head_to_head(
    load: Any, render: Any, steps: int, chosen: FamilyChoice, rounds: int, mag: list[float]
) -> tuple[float, float, float]:
    """fp32 eager vs the choice, interleaved: (reference s, choice s, choice PSNR dB)."""
    runs = [apply_choice(load(), c, steps, mag) for c in (REFERENCE, chosen)]
    frames = [render(run) for run in runs]  # warm-up
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for index, run in enumerate(runs):
            started = time.perf_counter()
            frames[index] = render(run)
            times[index].append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1]), psnr(frames[1], frames[0])


def deepen(model_dir: Path, blocks: int = BLOCKS) -> Path:
    """Give the checkpoint's transformer ``blocks`` repeated blocks (perturbed copies of its
    first): a step cache needs a head and a tail block, the tiny builders have one."""
    pipe = load_family(model_dir).pipe
    module = getattr(pipe, "transformer", None)
    if module is None or getattr(pipe, "transformer_2", None) is not None:
        return model_dir  # a U-Net (SVD), or two experts that must stay alike
    generator = torch.Generator().manual_seed(0)
    for stack in (c for c in module.children() if isinstance(c, torch.nn.ModuleList)):
        while len(stack) < blocks:
            block = copy.deepcopy(stack[0])
            with torch.no_grad():
                for parameter in block.parameters():
                    parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
            stack.append(block)
    module.register_to_config(num_layers=blocks)
    pipe.save_pretrained(model_dir, safe_serialization=True)
    return model_dir


def run_family(
    name: str, root: Path, kind: str, steps: int, rounds: int, compile_: bool
) -> FamilyRun:
    model_dir = deepen(build_tiny(name, root / name))
    spec = read_spec(model_dir)
    swaps = scheduler_swaps(family_of(spec.pipeline_class).scheduler_swaps)

    def load() -> Any:
        return load_family(model_dir)

    render = renderer(steps)
    entry = tune(
        load,
        render,
        kind=kind,
        pipeline=spec.pipeline_class,
        weights=family_weights(model_dir),
        size=f"{FRAMES}x{SIZE}x{SIZE}",
        steps=steps,
        search=Search.for_device(kind, swaps, compile_blocks=compile_),
        rounds=rounds,
    )
    if entry.chosen == REFERENCE:  # nothing beat fp32 eager: the choice is the reference
        seconds = entry.measured[0].seconds_per_video
        return FamilyRun(name, entry, seconds, seconds, float("inf"))
    ref_s, chosen_s, quality = head_to_head(
        load, render, steps, entry.chosen, rounds, entry.mag_ratios
    )
    return FamilyRun(name, entry, ref_s, chosen_s, quality)


def _db(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.1f}"


def report(runs: list[FamilyRun]) -> bool:
    print(
        f"\n{'family':<11} {'fp32 eager s':>12} {'choice s':>9} {'ratio':>6} {'PSNR dB':>8}  choice"
    )
    for run in runs:
        ratio = run.reference_s / run.chosen_s
        print(
            f"{run.name:<11} {run.reference_s:>12.3f} {run.chosen_s:>9.3f} {ratio:>5.2f}x "
            f"{_db(run.chosen_psnr):>8}  {run.entry.chosen.label()}"
        )
    header = f"{'option':<28} {'s/video':>8} {'PSNR dB':>8} {'calls':>6} {'block work':>10}"
    print(f"\n{'family':<11} {header}  verdict")
    for run in runs:
        reference = run.entry.measured[0]
        for m in run.entry.measured:
            work = m.block_linear_calls / max(reference.block_linear_calls, 1)
            seconds = "-" if m.seconds_per_video == float("inf") else f"{m.seconds_per_video:.3f}"
            field = AXIS_FIELDS.get(m.option)
            label = f"{m.option} {getattr(m.choice, field)}" if field else "fp32 eager"
            verdict = f"{'ok' if m.accepted else 'rejected'}: {m.note}"
            print(
                f"{run.name:<11} {label[:28]:<28} {seconds:>8} {_db(m.psnr_db):>8} "
                f"{m.denoiser_calls:>6} {work:>10.2f}  {verdict}"
            )
    ok = True
    print()
    for run in runs:
        floor = run.entry.floor_db
        checks = [
            (
                f"{run.name}: the choice is not slower than fp32 eager "
                f"({run.chosen_s:.3f} s vs {run.reference_s:.3f} s)",
                run.chosen_s <= run.reference_s * TOLERANCE,
            ),
            (
                f"{run.name}: every accepted option passed the {floor:g} dB floor "
                f"(choice {_db(run.chosen_psnr)} dB)",
                all(m.psnr_db >= floor for m in run.entry.measured if m.accepted)
                and run.chosen_psnr >= floor,
            ),
        ]
        reference = run.entry.measured[0]
        applied = [m for m in run.entry.measured if m.option == "cache" and m.denoiser_calls]
        if applied:
            cut = all(m.block_linear_calls < reference.block_linear_calls for m in applied)
            names = ", ".join(m.choice.cache for m in applied)
            checks.append(
                (f"{run.name}: each cache that applied ({names}) cut the block work", cut)
            )
        else:
            print(f"n/a  {run.name}: no step cache applies (its denoiser has no cache hooks)")
        for text, passed in checks:
            ok &= passed
            print(f"{'PASS' if passed else 'FAIL'} {text}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(CHECKPOINTS))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="also try compile_repeated_blocks")
    parser.add_argument("--kind", default="", help="device kind (default: this CPU's)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    kind = args.kind or device_key("cpu")
    print(
        f"device kind {kind}, one torch thread, {args.steps} steps, {FRAMES}x{SIZE}x{SIZE}, "
        f"floor {PSNR_FLOOR_DB:g} dB, median of {args.rounds} interleaved videos"
    )
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            run_family(name, Path(tmp), kind, args.steps, args.rounds, args.compile)
            for name in args.families.split(",")
        ]
    raise SystemExit(0 if report(runs) else 1)


if __name__ == "__main__":
    main()
