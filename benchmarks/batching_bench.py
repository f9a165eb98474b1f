"""One job per GPU against continuous batching (``--batch 4``) on one local fleet
(``make bench-batching``).

One fleet, two regions on the same Redis and storage: ``single`` has one classic worker (one
job at a time), ``batched`` one worker with ``ANIMFLEET_WORKER_BATCH=4``; both serve the shipped
student with the same settings (fp32, eager: eager bf16 is many times slower on a CPU, and a
batch worker does not load compiled packages). First each mode's capacity is measured with a
burst of jobs; the one-job-per-GPU capacity sets the arrival rates. Then, at 50%, 90% and
130% of it, the same seeded Poisson schedule of the same jobs is submitted to each mode in
turn (which goes first alternates by load), and every job is waited for. A second burst after
the loads shows how far other work on the machine moved the capacity meanwhile.

Admission runs as in production, with ``ANIMFLEET_ADMISSION_ALLOWANCE=1`` (the most it allows):
a region holds one queued job per slot beside the running ones, so neither mode idles waiting
for the backlog's scheduler to hand it the next job; beyond that, jobs wait in the backlog.

Printed per load and mode: throughput (jobs / first submit to last completion), mean and p99
end-to-end latency (``completed_at - created_at`` from the records), their ratios, and the
exactly-once check (each job succeeded, started once, one output); the frames of each job are
decoded from both modes' MP4s and compared. PASS needs every job exactly once and the same
frames from both modes (bit-identical, or at least 50 dB PSNR). A PNG plots latency vs load.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from animfleet import logs
from animfleet.jobs import JobRecord, JobState
from animfleet.shipped_models import shipped_model
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from storage import open_store

MODES = {"single": 1, "batched": 4}
LOADS = (0.5, 0.9, 1.3)
PROMPTS = ("pan left", "zoom in", "rotate clockwise", "pan right", "zoom out")
MIN_PSNR_DB = 50.0
SAME_SETTINGS = {  # both workers: same model, precision and eager execution
    "ANIMFLEET_WORKER_PRECISION": "fp32",
    "ANIMFLEET_WORKER_COMPILE": "0",
    "ANIMFLEET_TORCH_THREADS": "1",
}
# A queued job ready behind every running one: each mode's next job is on its queue when a slot
# frees (the rest wait in the region's backlog, moved by the scheduler as slots free).
ADMISSION = {"ANIMFLEET_ADMISSION_ALLOWANCE": "1"}


@dataclass
class Run:
    """One mode at one load: the records of its jobs, in submit order."""

    mode: str
    load: float
    records: list[JobRecord] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)  # job id -> "running" log lines

    @property
    def latencies(self) -> list[float]:
        return [(r.completed_at or math.inf) - r.created_at for r in self.records]

    @property
    def throughput(self) -> float:
        first = min(r.created_at for r in self.records)
        last = max(r.completed_at or math.inf for r in self.records)
        return len(self.records) / (last - first)

    @property
    def exactly_once(self) -> tuple[int, int, int]:
        """(succeeded once, lost, duplicated)."""
        lost = sum(r.status is not JobState.SUCCEEDED for r in self.records)
        dup = sum(r.attempts != 1 or self.starts.get(r.id, 0) != 1 for r in self.records)
        return len(self.records) - lost - dup, lost, dup


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def start_fleet(root: Path, model: Path) -> LocalFleet:
    os.environ.update(ADMISSION)  # this process's dispatcher client reads it
    fleet = LocalFleet(
        root,
        regions=tuple(MODES),
        storage="local",
        workers_per_region=0,
        model_dir=model,
        scheduler=True,
        service_env=ADMISSION,
    )
    fleet.start()
    for region, batch in MODES.items():
        fleet.worker_env = {**SAME_SETTINGS, "ANIMFLEET_WORKER_BATCH": str(batch)}
        fleet.start_worker(region)
    fleet.wait_for_workers(MODES)
    return fleet


def job_options(index: int, args: argparse.Namespace) -> tuple[str, dict[str, int]]:
    prompt = PROMPTS[index % len(PROMPTS)]
    return prompt, {
        "frames": args.frames,
        "width": args.size,
        "height": args.size,
        "seed": index,
        "fps": 8,
    }


def submit_schedule(
    client: Client,
    region: str,
    image: bytes,
    gaps: list[float],
    args: argparse.Namespace,
    bar: tqdm,
) -> list[str]:
    """Submit one job after each gap (seconds); returns the job ids."""
    ids: list[str] = []
    due = time.monotonic()
    for index, gap in enumerate(gaps):
        due += gap
        time.sleep(max(0.0, due - time.monotonic()))
        prompt, options = job_options(index, args)
        ids.append(client.submit(image, prompt, home_region=region, **options).id)  # type: ignore[arg-type]
        bar.update(0.5)
    return ids


def wait_all(client: Client, ids: list[str], bar: tqdm, timeout: float = 600) -> list[JobRecord]:
    deadline = time.monotonic() + timeout
    records: dict[str, JobRecord] = {}
    while len(records) < len(ids) and time.monotonic() < deadline:
        for job_id in ids:
            if job_id not in records:
                record = client.get(job_id)
                if record.status.terminal:
                    records[job_id] = record
                    bar.update(0.5)
        time.sleep(0.05)
    return [records.get(job_id) or client.get(job_id) for job_id in ids]


def count_starts(fleet: LocalFleet, region: str, ids: list[str]) -> dict[str, int]:
    log = (fleet.root / "logs" / f"worker-{region}-0.log").read_text()
    running = [line for line in log.splitlines() if '"status": "running"' in line]
    return {job_id: sum(job_id in line for line in running) for job_id in ids}


def frames_of(fleet: LocalFleet, region: str, record: JobRecord) -> npt.NDArray[np.uint8]:
    assert record.output is not None
    data = open_store(fleet.topology.region(region).storage).get(record.output.key)
    with av.open(io.BytesIO(data), mode="r") as container:
        decoded = [
            np.asarray(f.to_ndarray(format="rgb24"), np.uint8) for f in container.decode(video=0)
        ]
        return np.stack(decoded)


def same_frames(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8]) -> float:
    """PSNR in dB between two videos; inf when bit-identical."""
    if a.shape != b.shape:
        return 0.0
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def compare(fleet: LocalFleet, done: dict[str, Run]) -> list[float]:
    """Per job: PSNR of the batched mode's frames against the one-job-per-GPU mode's."""
    quality = []
    for one, other in zip(done["single"].records, done["batched"].records, strict=True):
        if one.output is None or other.output is None:
            quality.append(0.0)
            continue
        reference = frames_of(fleet, "single", one)
        quality.append(same_frames(frames_of(fleet, "batched", other), reference))
    return quality


def measure_capacity(
    fleet: LocalFleet, client: Client, image: bytes, args: argparse.Namespace, bar: tqdm
) -> dict[str, float]:
    """Jobs per second of each mode, from a burst of ``args.burst`` jobs submitted at once."""
    capacity = {}
    for region in MODES:
        ids = submit_schedule(client, region, image, [0.0] * args.burst, args, bar)
        records = wait_all(client, ids, bar)
        run = Run(region, 0.0, records, count_starts(fleet, region, ids))
        started = min(r.started_at or math.inf for r in records)
        last = max(r.completed_at or math.inf for r in records)
        capacity[region] = len(records) / (last - started)
        if run.exactly_once[0] != len(records):
            raise SystemExit(f"capacity burst on {region}: not every job ran exactly once")
    return capacity


def plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for mode, colour in zip(MODES, ("tab:blue", "tab:orange"), strict=True):
        mine = [run for run in runs if run.mode == mode]
        loads = [100 * run.load for run in mine]
        label = "one job per GPU" if mode == "single" else f"--batch {MODES[mode]}"
        axes.plot(loads, [statistics.mean(r.latencies) for r in mine], "o-", color=colour,
                  label=f"{label}: mean")  # fmt: skip
        axes.plot(loads, [p99(r.latencies) for r in mine], "s--", color=colour,
                  label=f"{label}: p99")  # fmt: skip
    axes.set_xlabel("offered load (% of one-job-per-GPU capacity)")
    axes.set_ylabel("end-to-end latency (s)")
    axes.set_title("Continuous batching vs one job per GPU (Poisson arrivals)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report(runs: list[Run], capacity: list[dict[str, float]], quality: list[float]) -> bool:
    print()
    for when, measured in zip(("before", "after"), capacity, strict=False):
        print(
            f"capacity from a burst {when} the loads: one job per GPU "
            f"{measured['single']:.2f} jobs/s, --batch 4 {measured['batched']:.2f} jobs/s "
            f"({measured['batched'] / measured['single']:.2f}x)"
        )
    drift = capacity[-1]["single"] / capacity[0]["single"] - 1
    if abs(drift) > 0.2:  # other work on the machine sped up or slowed the one-job mode
        print(f"note: the one-job capacity drifted {drift:+.0%} during the run; the loads' "
              "percentages are of the capacity measured before them")  # fmt: skip
    head = f"{'load':>5} {'mode':<9}{'jobs/s':>8}{'mean s':>9}{'p99 s':>8}  {'once/lost/dup':<14}"
    print(f"\n{head}{'thr x':>7}{'mean x':>8}{'p99 x':>7}")
    ok = True
    by_key = {(run.load, run.mode): run for run in runs}
    for load in sorted({run.load for run in runs}):
        base = by_key[(load, "single")]
        for mode in MODES:
            run = by_key[(load, mode)]
            once, lost, dup = run.exactly_once
            ok &= lost == 0 and dup == 0
            mean = statistics.mean(run.latencies)
            line = (
                f"{load:>5.0%} {mode:<9}{run.throughput:>8.2f}{mean:>9.2f}"
                f"{p99(run.latencies):>8.2f}  {f'{once}/{lost}/{dup}':<14}"
            )
            if mode != "single":
                line += (
                    f"{run.throughput / base.throughput:>7.2f}"
                    f"{statistics.mean(run.latencies) / statistics.mean(base.latencies):>8.2f}"
                    f"{p99(run.latencies) / p99(base.latencies):>7.2f}"
                )
            print(line)
    identical = sum(q == math.inf for q in quality)
    worst = min(quality) if quality else math.inf
    same = worst >= MIN_PSNR_DB
    print(
        f"\nframes, batched vs one job per GPU: {identical}/{len(quality)} bit-identical, "
        f"worst {worst:.1f} dB (bar {MIN_PSNR_DB:.0f} dB)"
    )
    print(f"every job ended exactly once (none lost, none duplicated): {'PASS' if ok else 'FAIL'}")
    print(f"same frames in both modes: {'PASS' if same else 'FAIL'}")
    return ok and same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=24, help="jobs per load and mode")
    parser.add_argument("--burst", type=int, default=12, help="jobs in each capacity burst")
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=32, help="width and height")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--root", type=Path, default=Path("run/bench-batching"))
    parser.add_argument("--plot", type=Path, default=Path("run/bench-batching/latency.png"))
    args = parser.parse_args()
    logs.configure("WARNING")  # the bar, not the client's per-job lines
    model = shipped_model()
    if model is None:
        raise SystemExit("no shipped model under models/")
    image = Path("tools/assets/example.png").read_bytes()
    total = 4 * args.burst + 2 * len(LOADS) * args.jobs
    fleet = start_fleet(args.root, model)
    client = Client(fleet.topology)
    runs: list[Run] = []
    quality: list[float] = []
    try:
        with tqdm(total=total, unit="job", desc="bench-batching", file=sys.stderr) as bar:
            capacity = [measure_capacity(fleet, client, image, args, bar)]
            rng = random.Random(args.seed)
            for turn, load in enumerate(LOADS):
                rate = load * capacity[0]["single"]
                gaps = [0.0] + [rng.expovariate(rate) for _ in range(args.jobs - 1)]
                order = list(MODES) if turn % 2 == 0 else list(reversed(MODES))
                done: dict[str, Run] = {}
                for mode in order:
                    bar.set_postfix(load=f"{load:.0%}", mode=mode)
                    ids = submit_schedule(client, mode, image, gaps, args, bar)
                    records = wait_all(client, ids, bar)
                    done[mode] = Run(mode, load, records, count_starts(fleet, mode, ids))
                runs += [done[mode] for mode in MODES]
                quality += compare(fleet, done)
            capacity.append(measure_capacity(fleet, client, image, args, bar))
    finally:
        client.close()
        fleet.stop()
    passed = report(runs, capacity, quality)
    plot(runs, args.plot)
    print(f"plot: {args.plot}")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
