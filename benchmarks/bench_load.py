"""Weights from the bucket and from disk, beside the physical limit on the same machine.

`make bench-load` (``python -m benchmarks.bench_load --gb 2``) writes a model directory of
random safetensors files (a few sizes) to local disk, pushes it to a local SeaweedFS S3 server
and measures, in interleaved rounds (the order alternating each round):

* **S3 fetch**: ``ModelRegistry.fetch`` into an empty cache, as a worker does (concurrent
  ranged reads, written to disk, every file's sha256 checked, journalled for resume), beside
  the raw read of the same blobs from the same server without writing or hashing: the same
  parallel ranged GETs, and one streamed GET per object; the faster is the limit.
* **Disk load**: ``safetensors.torch.load_file`` of each file (memory-mapped, as diffusers
  loads a local directory) and a first touch of every page of every weight (what the model's
  first use does: the page cache's pages are mapped, not copied), beside reading the same files
  with large buffered reads into one buffer. Both warm (the page cache holds the files) and
  cold (the files' pages dropped with ``posix_fadvise`` first). A row that copies every weight
  byte after loading (what moving the weights to another device costs) is shown for reference.

Each row also gives this process's CPU seconds per GB (all its threads; the SeaweedFS server's
are not counted): on a machine short of CPU the fetch's price is its writes and sha256 on top
of the raw read's. PASS when each measured path reaches ``--bar`` (0.7) of its raw read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from launcher.local_fleet import LocalFleet
from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY
from storage.blob_fetch import PART_BYTES, THREADS
from storage.registry import Manifest, ModelRegistry
from storage.s3 import S3Store

GB = 1e9
# The share of the weights each file holds: a large denoiser, a text encoder, a VAE, a small one.
SHARES = {
    "transformer/diffusion_pytorch_model.safetensors": 0.55,
    "text_encoder/model.safetensors": 0.3,
    "vae/diffusion_pytorch_model.safetensors": 0.1,
    "image_encoder/model.safetensors": 0.05,
}
TENSOR_BYTES = 64 * 2**20
PAGE = 4096


def write_model(root: Path, total_bytes: int, seed: int = 0) -> list[Path]:
    """A model directory of random-valued safetensors files (and its small JSON files)."""
    rng = np.random.default_rng(seed)
    files = []
    for name, share in SHARES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "config.json").write_text('{"_class_name": "Random"}\n')
        left = int(total_bytes * share) // 4 * 4
        tensors: dict[str, torch.Tensor] = {}
        while left > 0:
            size = min(TENSOR_BYTES, left)
            values = rng.integers(0, 2**31, size // 4, dtype=np.int32)
            tensors[f"layer{len(tensors)}.weight"] = torch.from_numpy(values).view(torch.float32)
            left -= size
        save_file(tensors, str(path))
        files.append(path)
    (root / "model_index.json").write_text('{"_class_name": "RandomPipeline"}\n')
    return files


def drop_cache(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (theirs only: other processes keep theirs)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def raw_disk_read(paths: list[Path]) -> int:
    buffer = bytearray(16 * 2**20)
    total = 0
    for path in paths:
        with path.open("rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                total += count
    return total


def safetensors_load(paths: list[Path]) -> int:
    """Load each file memory-mapped and touch every page of every weight once."""
    total = 0
    for path in paths:
        for tensor in load_file(str(path)).values():
            flat = tensor.reshape(-1).view(torch.uint8)
            flat[::PAGE].sum()  # one read per page: each is mapped from the page cache
            total += flat.numel()
    return total


def safetensors_copy(paths: list[Path]) -> int:
    """Load each file memory-mapped and copy every weight byte once into a buffer."""
    sink = torch.empty(TENSOR_BYTES, dtype=torch.uint8)
    total = 0
    for path in paths:
        for tensor in load_file(str(path)).values():
            flat = tensor.reshape(-1).view(torch.uint8)
            sink[: flat.numel()].copy_(flat)
            total += flat.numel()
    return total


def raw_s3_ranged(store: S3Store, manifest: Manifest, registry: ModelRegistry) -> int:
    """Every blob with the fetch's parallel ranged GETs, the bytes dropped on arrival."""
    parts = [
        (registry.blob_key(file.sha256), offset, min(PART_BYTES, file.bytes - offset))
        for file in manifest.files
        for offset in range(0, file.bytes, PART_BYTES)
    ]
    with ThreadPoolExecutor(THREADS) as pool:
        return sum(pool.map(lambda part: len(store.read_range(*part)), parts))


def raw_s3_streamed(store: S3Store, manifest: Manifest, registry: ModelRegistry) -> int:
    """Every blob with one GET each, streamed in 8 MiB reads, the bytes dropped on arrival."""
    total = 0
    for file in manifest.files:
        body = store.client.get_object(Bucket=store.bucket, Key=registry.blob_key(file.sha256))
        while chunk := body["Body"].read(8 * 2**20):
            total += len(chunk)
    return total


def timed(run: Callable[[], int]) -> tuple[float, float]:
    """GB/s of one run (the bytes it returns over its seconds) and its CPU seconds per GB."""
    cpu, started = os.times(), time.perf_counter()
    count = run()
    seconds, after = time.perf_counter() - started, os.times()
    cpu_s = after.user + after.system - cpu.user - cpu.system
    return count / GB / seconds, cpu_s / (count / GB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="size of the weights (GB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bar", type=float, default=0.7, help="PASS at this share of raw")
    parser.add_argument("--dir", default=None, help="where to write (default: $TMPDIR)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-load-", dir=args.dir))
    try:
        model = work / "model"
        started = time.perf_counter()
        weights = write_model(model, int(args.gb * GB))
        size = sum(path.stat().st_size for path in weights)
        print(
            f"wrote {size / GB:.2f} GB in {len(weights)} safetensors files to {model} "
            f"({time.perf_counter() - started:.0f} s)"
        )
        with LocalFleet(work / "fleet", storage="s3", workers_per_region=0) as fleet:
            store = S3Store(
                "bench-load",
                fleet.s3_endpoint,
                access_key_id=S3_ACCESS_KEY,
                secret_access_key=S3_SECRET_KEY,
                read_timeout=120,
            )
            store.ensure_bucket()
            registry = ModelRegistry(store)
            started = time.perf_counter()
            manifest = registry.push(model, "bench@1")
            print(
                f"pushed {manifest.bytes / GB:.2f} GB to SeaweedFS at {fleet.s3_endpoint} "
                f"({time.perf_counter() - started:.0f} s); {THREADS} threads, "
                f"{PART_BYTES // 2**20} MiB parts; {args.rounds} interleaved rounds"
            )

            def fetch() -> int:
                cache = work / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                registry.fetch("bench@1", cache, manifest.hash)
                assert registry.last_fetch is not None
                return registry.last_fetch.downloaded

            def cold(run: Callable[[list[Path]], int]) -> Callable[[], int]:
                def measured() -> int:
                    drop_cache(weights)
                    return run(weights)

                return measured

            rows: dict[str, Callable[[], int]] = {
                "s3 raw: parallel ranged GETs": lambda: raw_s3_ranged(store, manifest, registry),
                "s3 raw: one streamed GET per object": lambda: raw_s3_streamed(
                    store, manifest, registry
                ),
                "s3 fetch (ranged, written, sha256, resumable)": fetch,
                "disk raw read, warm": lambda: raw_disk_read(weights),
                "disk safetensors load, warm": lambda: safetensors_load(weights),
                "disk safetensors load + copy, warm": lambda: safetensors_copy(weights),
                "disk raw read, cold": cold(raw_disk_read),
                "disk safetensors load, cold": cold(safetensors_load),
            }
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
            raw_disk_read(weights)  # warm the page cache once for the warm rows
            for round_index in range(args.rounds):
                order = list(rows) if round_index % 2 == 0 else list(reversed(rows))
                for name in order:
                    results[name].append(timed(rows[name]))
            shutil.rmtree(work / "cache", ignore_errors=True)
        cores = os.cpu_count()
        loads = " ".join(f"{load:.1f}" for load in os.getloadavg())
        print(f"\n{cores} cores; load average at the end (1, 5, 15 min): {loads}")
        report(results, args.bar)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(results: dict[str, list[tuple[float, float]]], bar: float) -> None:
    median = {name: statistics.median(r[0] for r in runs) for name, runs in results.items()}
    best = {name: max(r[0] for r in runs) for name, runs in results.items()}
    cpu = {name: statistics.median(r[1] for r in runs) for name, runs in results.items()}
    s3_raw = max(median[name] for name in results if name.startswith("s3 raw"))
    warm_raw = median["disk raw read, warm"]
    baselines = {
        "s3 fetch (ranged, written, sha256, resumable)": s3_raw,
        "disk safetensors load, warm": warm_raw,
        "disk safetensors load, cold": median["disk raw read, cold"],
    }
    reference = {"disk safetensors load + copy, warm": warm_raw}
    print(f"\n{'path':<48} {'median GB/s':>12} {'best GB/s':>10} {'x raw':>6} {'CPU s/GB':>9}")
    for name in results:
        raw = baselines.get(name) or reference.get(name)
        shown = f"{median[name] / raw:.2f}" if raw else ""
        print(f"{name:<48} {median[name]:>12.2f} {best[name]:>10.2f} {shown:>6} {cpu[name]:>9.2f}")
    print()
    for name, raw in baselines.items():
        ratio = median[name] / raw
        verdict = "PASS" if ratio >= bar else "FAIL"
        print(
            f"{verdict}: {name}: {median[name]:.2f} GB/s = {ratio:.2f}x the raw read "
            f"({raw:.2f} GB/s), bar {bar}x"
        )


if __name__ == "__main__":
    main()
