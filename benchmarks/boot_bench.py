"""Worker boot to first job: load the served model as the worker does (`load_animator`), then
animate one job, in a fresh process; with the AOT artifact, compiling at boot (a cold inductor
cache), and eager. `python -m benchmarks.boot_bench`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, time
started = time.perf_counter()
from animfleet.jobs import JobParams
from tools.serving.measure import test_card
from workers.model.animator import load_animator
from workers.settings import WorkerSettings
imported = time.perf_counter()
animator = load_animator(WorkerSettings.from_env())
loaded = time.perf_counter()
params = JobParams(prompt="pan left slowly", frames=8, fps=8, width=64, height=64, seed=0)
animator.animate(test_card(64), params)
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "load_and_warmup_s": loaded - imported,
                  "first_job_s": done - loaded, "compiled": animator.info["compiled"],
                  "aot": animator.info["aot"], "serving": animator.info["serving"]}))
"""

MODES = {
    "AOT artifact": {"ANIMFLEET_WORKER_AOT": "1"},
    "torch.compile at boot (cold cache)": {
        "ANIMFLEET_WORKER_AOT": "0",
        "ANIMFLEET_WORKER_COMPILE": "1",
    },
    "eager": {"ANIMFLEET_WORKER_COMPILE": "0"},
}


def boot(model: str, threads: int, extra: dict[str, str]) -> dict[str, object]:
    env = {
        **os.environ,
        "ANIMFLEET_MODEL_DIR": model,
        "ANIMFLEET_TORCH_THREADS": str(threads),
        "ANIMFLEET_WORKER_SHAPE_BUCKETS": "8x64x64",
        **extra,
    }
    with tempfile.TemporaryDirectory() as cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache  # nothing compiled earlier helps
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
        )
        total = time.perf_counter() - started
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    result["boot_to_first_job_s"] = total
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="animfleet-small-distilled")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'mode':<36} {'boot to first job':>17} {'imports':>8} {'load+warm-up':>12}  compiled")
    for name, extra in MODES.items():
        r = boot(args.model, args.threads, extra)
        print(
            f"{name:<36} {r['boot_to_first_job_s']:>15.1f} s {r['import_s']:>6.1f} s "
            f"{r['load_and_warmup_s']:>10.1f} s  {r['compiled']} ({r['serving']}; {r['aot']})"
        )


if __name__ == "__main__":
    main()
