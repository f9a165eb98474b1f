"""`make bench-model`: each model optimization against the plain pipeline, in one run.

Rows are cumulative: baseline (fp32, eager, stock attention, DDIM 32 steps x 3 passes), then
+ bf16, + context de-dup, + DPM-Solver++ 15 steps, + torch.compile of the U-Net, + of the VAE
decoder. Every row runs in a fresh
process (so its peak RSS is its own) through the worker's own loading code, with one warm-up
video and then ``--repeats`` timed videos; the median is reported. PSNR compares the frames
with an fp32, eager, stock-attention run of the same sampler and steps, so it isolates the
numerical effect of the row. A sampler section compares DDIM and DPM-Solver++ at 15 steps with a
100-step reference, and an attention section times the temporal cross-attention alone.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tqdm import tqdm

from benchmarks.attention_bench import attention_report, unet_flops
from benchmarks.shapes import save_bench_model
from benchmarks.vae_bench import vae_report
from workers.model.animator import ShapeBucket, Variant, load_pipeline
from workers.model.compiled import compile_modules

PROMPT = "zoom in slowly and rotate clockwise"
Frames = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Row:
    label: str
    precision: str = "fp32"
    dedup: bool = False
    scheduler: str = "ddim"
    steps: int = 32
    compile: bool = False
    compile_decoder: bool = False


ROWS = [
    Row("baseline: fp32, eager, stock attn, DDIM 32x3"),
    Row("+ bf16", precision="bf16"),
    Row("+ context de-dup", precision="bf16", dedup=True),
    Row("+ DPM-Solver++ 15 steps", precision="bf16", dedup=True, scheduler="dpmsolver++", steps=15),
    Row("+ torch.compile (U-Net)", "bf16", True, "dpmsolver++", 15, compile=True),
    Row("+ torch.compile (VAE decoder)", "bf16", True, "dpmsolver++", 15, True, True),
]


def _image(size: int) -> Frames:
    """A smooth test card: gradients and a disc, so motion and errors are visible."""
    y, x = np.mgrid[0:size, 0:size] / size
    disc = ((x - 0.6) ** 2 + (y - 0.4) ** 2 < 0.05).astype(float)
    rgb = np.stack([x, y, 0.5 + 0.5 * disc], axis=-1)
    return (rgb * 255).astype(np.uint8)


def _run_row(model_dir: str, row: Row, bucket: ShapeBucket, repeats: int, queue: Any) -> None:
    """In a child process: load, (compile,) warm up, time ``repeats`` videos."""
    torch.set_num_threads(2)
    variant = Variant(
        name="bench",
        scheduler=row.scheduler,
        precision="bf16" if row.precision == "bf16" else "fp32",
        context_dedup=row.dedup,
    )
    pipe = load_pipeline(model_dir, variant)
    # Counted per step, outside the U-Net: a hook inside a compiled module would be traced,
    # and a Python counter read there would be specialised on (a recompile per call).
    steps = [0]
    compiled = (
        compile_modules(pipe, decoder=row.compile_decoder, max_buckets=1) if row.compile else None
    )
    image = _image(bucket.height)

    def video() -> Frames:
        frames: Frames = pipe(
            image,
            PROMPT,
            num_frames=bucket.frames,
            fps=8,
            num_inference_steps=row.steps,
            seed=0,
            on_step=lambda *_: steps.__setitem__(0, steps[0] + 1),
        )
        return frames

    started = time.perf_counter()
    frames = video()  # warm-up (and compilation); a reference run (repeats=0) ends here
    warmup_s = time.perf_counter() - started
    steps[0] = 0 if repeats else steps[0]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        frames = video()
        times.append(time.perf_counter() - started)
    queue.put(
        {
            "times": times,
            "warmup_s": warmup_s,
            # One U-Net call per step, its batch holding the three guidance passes.
            "unet_evals": steps[0] // max(repeats, 1) * 3,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "recompiles": compiled.recompiles if compiled else 0,
            "frames": frames,
        }
    )


def run_row(model_dir: Path, row: Row, bucket: ShapeBucket, repeats: int) -> dict[str, Any]:
    context = mp.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_run_row, args=(str(model_dir), row, bucket, repeats, queue))
    child.start()
    result: dict[str, Any] = queue.get()
    child.join()
    return result


def psnr(a: Frames, b: Frames) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "bench")
    args = parser.parse_args()
    torch.set_num_threads(2)
    bucket = ShapeBucket(args.frames, args.size, args.size)
    model_dir = save_bench_model(args.model_dir)
    print(
        f"model: {model_dir}, {bucket.frames} frames of {bucket.height}x{bucket.width}, "
        f"77 text tokens + 1 image token, torch threads 2, median of {args.repeats}"
    )

    references = {
        "ddim32": Row("fp32 DDIM 32"),
        "dpm15": Row("fp32 DPM-Solver++ 15", scheduler="dpmsolver++", steps=15),
        "ddim15": Row("fp32 DDIM 15", steps=15),
        "ddim100": Row("fp32 DDIM 100", steps=100),
    }
    # Cheap sections first; the compile rows last (their first run compiles for minutes).
    flops = unet_flops(model_dir, bucket)
    print(
        f"U-Net FLOPs per call (batch 3): stock {flops['stock'] / 1e9:.2f} GFLOP, "
        f"de-dup {flops['dedup'] / 1e9:.2f} GFLOP, saved "
        f"{100 * (1 - flops['dedup'] / flops['stock']):.1f}%"
    )
    print(attention_report(model_dir, bucket))
    print(vae_report(model_dir, bucket, _image(bucket.height)))
    print()
    eager = [(f"row {i}", row) for i, row in enumerate(ROWS) if not row.compile]
    compiled = [(f"row {i}", row) for i, row in enumerate(ROWS) if row.compile]
    references_jobs = [(name, row) for name, row in references.items() if name != "ddim32"]
    jobs = eager + references_jobs + compiled
    results: dict[str, dict[str, Any]] = {}
    for name, row in tqdm(jobs, desc="bench-model", unit="config"):
        repeats = args.repeats if name.startswith("row") else 0
        results[name] = run_row(model_dir, row, bucket, repeats)
        seconds = statistics.median(results[name]["times"] or [results[name]["warmup_s"]])
        tqdm.write(
            f"  {row.label}: {seconds:.2f} s per video, {results[name]['unet_evals']} "
            f"U-Net evals, peak RSS {results[name]['peak_rss_mb']:.0f} MB"
        )
    results["ddim32"] = results["row 0"]

    base = statistics.median(results["row 0"]["times"])
    print()
    print(
        f"{'configuration':<46} {'median s':>9} {'U-Net evals':>11} {'peak RSS MB':>11} "
        f"{'speedup':>8} {'PSNR vs fp32':>13}"
    )
    for i, row in enumerate(ROWS):
        result = results[f"row {i}"]
        reference = results["dpm15" if row.scheduler == "dpmsolver++" else "ddim32"]["frames"]
        median = statistics.median(result["times"])
        quality = psnr(result["frames"], reference)
        print(
            f"{row.label:<46} {median:>9.2f} {result['unet_evals']:>11} "
            f"{result['peak_rss_mb']:>11.0f} {base / median:>7.2f}x {quality:>10.1f} dB"
        )
    for name, row in compiled:
        print(
            f"{row.label}: first video (compiling) {results[name]['warmup_s']:.1f} s, "
            f"recompiles after warm-up {results[name]['recompiles']}"
        )

    reference = results["ddim100"]["frames"]
    print("\nsampler accuracy at 15 steps (fp32), PSNR vs DDIM 100 steps:")
    for name in ("ddim15", "dpm15"):
        print(f"  {references[name].label:<24} {psnr(results[name]['frames'], reference):6.1f} dB")


if __name__ == "__main__":
    main()
