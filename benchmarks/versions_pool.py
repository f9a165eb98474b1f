"""One worker pool serving several model versions, against the alternatives, in one run.

Arms, interleaved job by job on the same job (8 frames, 32x32, eager fp32, one thread):
- one version: every job on version A (the baseline);
- shared pool: jobs alternate A, B on one worker holding both
  (``workers.served_versions.ModelShelf``);
- one version per worker, switching: jobs alternate, and each switch loads the other version,
  which is what a worker that holds one version at a time pays when its queue mixes versions.
Per-version queues avoid switching but split the GPUs: a 5-10 % canary needs a GPU of its own.
Also: the memory a second resident version costs, and that a version's frames are the same
through the shelf as loaded alone. ``python -m benchmarks.versions_pool`` (``make bench-versions``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from animfleet.jobs import JobParams
from animfleet.shipped_models import resolve_model
from tools.serving.measure import test_card
from workers.model import Animator
from workers.model.animator import load_animator
from workers.served_versions import ModelShelf
from workers.settings import WorkerSettings

PARAMS = JobParams(prompt="pan left slowly", frames=8, fps=8, width=32, height=32, seed=0)
BAR = 1.10  # the shared pool may cost at most this much per job over one version


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def load(model_dir: Path) -> Animator:
    env = {"ANIMFLEET_MODEL_DIR": str(model_dir), "ANIMFLEET_WORKER_COMPILE": "0"}
    return load_animator(WorkerSettings.from_env(env))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="animfleet-small-distilled")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=6, help="jobs per arm per round")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    image = test_card(32)
    source = resolve_model(args.model)
    with tempfile.TemporaryDirectory() as scratch:
        second = Path(scratch) / "version-b"
        shutil.copytree(source, second, ignore=shutil.ignore_patterns("aot", ".*"))
        version_a = load(source)
        before = rss_mb()
        shelf = ModelShelf(version_a, "a@1", lambda _: load(second), capacity=4)
        shelf.get("b@1")
        second_version_mb = rss_mb() - before
        alone = version_a.animate(image, PARAMS)
        assert np.array_equal(shelf.get("a@1")[1].animate(image, PARAMS), alone)
        assert np.array_equal(shelf.get("b@1")[1].animate(image, PARAMS), alone)

        def one_version() -> None:
            version_a.animate(image, PARAMS)

        turns = {"pool": 0, "switch": 0}

        def shared_pool() -> None:
            turns["pool"] += 1
            shelf.get("a@1" if turns["pool"] % 2 else "b@1")[1].animate(image, PARAMS)

        def switching() -> None:
            turns["switch"] += 1
            load(source if turns["switch"] % 2 else second).animate(image, PARAMS)

        arms = {"one version": one_version, "shared pool": shared_pool, "switching": switching}
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.rounds * args.jobs):  # job by job, the arms in a fresh order
            order = list(arms)
            random.shuffle(order)
            for name in order:
                started = time.perf_counter()
                arms[name]()
                times[name].append(time.perf_counter() - started)
    base = statistics.median(times["one version"])
    jobs = args.rounds * args.jobs
    print(f"{jobs} jobs per arm, interleaved job by job; 8x32x32, eager fp32, one thread")
    print("| arm | median s / job | vs one version |")
    print("| --- | ---: | ---: |")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"| {name} | {median:.4f} | {median / base:.2f}x |")
    pool = statistics.median(times["shared pool"]) / base
    print(f"\nsecond resident version: +{second_version_mb:.1f} MB RSS")
    print("frames through the shelf equal the version loaded alone: yes (exact)")
    verdict = "PASS" if pool <= BAR else "FAIL"
    print(f"{verdict}: shared pool {pool:.2f}x one version (bar <= {BAR:.2f}x)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
