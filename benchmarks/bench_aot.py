"""`make bench-aot`: the AOT packages against the eager model, bucket by bucket.

The served model is loaded as its serving profile's entry for this CPU asks (precision,
de-dup), with the AOT packages `make compile-model` built for it. For each bucket (square and
non-square working sizes, masked-box sizes, other frame counts) one video on a test card is
timed eagerly and compiled, interleaved round by round in this process on one torch thread; the
table gives the median seconds, the ratio eager / compiled, which package served the bucket
(``aot``: a static one, ``aot-dynamic``: the one for any working size, ``eager``: none) and the
PSNR of the compiled frames against the eager ones, PASS at >= 40 dB and a package serving it.
A bucket with a static package is also timed on the dynamic one (``dyn s``: what a static
package saves).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import torch

from animfleet.shipped_models import resolve_model
from tools.serving.cli import SERVED_MODEL
from tools.serving.tune import base_variant
from workers.model import Animator
from workers.model.runtime.aot import AOT_DIR, MANIFEST, AOTDenoiser
from workers.model.runtime.loading import ShapeBucket
from workers.model.runtime.profile import PSNR_FLOOR_DB, choose, device_key, psnr

# The hot buckets, non-square working sizes (a 512x320 request, a 320x512 one, a 1024x384 one),
# small masked boxes and other frame counts.
BUCKETS = "8x64x64,8x32x32,8x40x64,8x64x40,8x24x64,8x16x24,8x48x32,16x56x56,4x64x64"


def _timed(animator: Animator, bucket: ShapeBucket) -> tuple[float, npt.NDArray[np.uint8]]:
    started = time.perf_counter()
    frames = animator.card_video(bucket)
    return time.perf_counter() - started, frames


@contextlib.contextmanager
def _dynamic_only(denoiser: AOTDenoiser) -> Iterator[None]:
    """The static packages set aside: every shape goes to the dynamic package."""
    static, denoiser.runners = denoiser.runners, {}
    try:
        yield
    finally:
        denoiser.runners = static


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SERVED_MODEL)
    parser.add_argument("--buckets", default=BUCKETS)
    parser.add_argument("--repeats", type=int, default=5, help="timed videos per arm and bucket")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = resolve_model(args.model)
    choice, source = choose(model, device_key("cpu"))
    variant = replace(
        base_variant(model), precision=choice.precision, context_dedup=choice.context_dedup
    )
    animator = Animator(model, variant, compile=True, aot=True, jit=False)
    torch.set_num_threads(args.threads)  # the animator sets the machine's count
    print(f"model {model.name}, {variant.precision}, {variant.steps} steps ({source})")
    denoiser = animator.compiled
    if not isinstance(denoiser, AOTDenoiser):
        print(f"no AOT packages: {animator.aot_status}; run `make compile-model` first")
        return 1
    print(animator.aot_status)
    for manifest in sorted((model / AOT_DIR).glob(f"*/{MANIFEST}")):
        sizes = sum(p.stat().st_size for p in manifest.parent.iterdir()) / 2**20
        print(f"  {manifest.parent.name}: {sizes:.1f} MiB on disk")
    header = f"{'bucket':<10} {'served by':<12} {'eager s':>8} {'aot s':>8} {'ratio':>6}"
    print(f"\n{header} {'PSNR dB':>8}  verdict  {'dyn s':>6}")
    failed = 0
    for bucket in [ShapeBucket.parse(b) for b in args.buckets.split(",") if b.strip()]:
        denoiser.ran.clear()
        compiled_frames = animator.card_video(bucket)  # first calls: lazy kernels, caches
        path = max(denoiser.ran, key=lambda name: denoiser.ran[name])
        with denoiser.eager():
            eager_frames = animator.card_video(bucket)
        eager_times, compiled_times, dynamic_times = [], [], []
        for _ in range(args.repeats):
            with denoiser.eager():
                eager_times.append(_timed(animator, bucket)[0])
            compiled_times.append(_timed(animator, bucket)[0])
            if path == "aot" and denoiser.dynamic is not None:
                with _dynamic_only(denoiser):
                    dynamic_times.append(_timed(animator, bucket)[0])
        eager_s, compiled_s = statistics.median(eager_times), statistics.median(compiled_times)
        dynamic = f"{statistics.median(dynamic_times):>6.3f}" if dynamic_times else f"{'':>6}"
        quality = psnr(compiled_frames, eager_frames)
        ok = quality >= PSNR_FLOOR_DB and path != "eager"
        failed += not ok
        name = f"{bucket.frames}x{bucket.height}x{bucket.width}"
        verdict = "PASS" if ok else "FAIL"
        print(
            f"{name:<10} {path:<12} {eager_s:>8.3f} {compiled_s:>8.3f} "
            f"{eager_s / compiled_s:>5.2f}x {quality:>8.1f}  {verdict:<7} {dynamic}"
        )
    print(f"\nbar: PSNR >= {PSNR_FLOOR_DB:g} dB vs eager and a package serving every bucket")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
