"""``make loadtest``: start a local fleet of 3 regions x N workers with the model stand-in, drive
it through the HTTP gateways with locust (a spike profile), wait for every accepted job to end,
then report throughput, end-to-end latency, success rate, spillover share and the accounting
(submitted = succeeded + failed + canceled + expired; unaccounted must be 0), and a PNG of
latency over time.

    python -m benchmarks.loadtest.run --jobs 20000 --workers 4 --job-seconds 0.5

``--mode both`` (the default) runs the same spike twice, on fresh fleets: ``retry`` (the earlier
policy: a full fleet answers 429 after the dispatcher's retries, clients wait Retry-After) and
``backlog`` (a full fleet keeps the job in its home backlog and the scheduler starts it), and
prints them side by side: submit success rate, end-to-end p50/p99, jobs lost, backlog peak.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

from animfleet.jobs import JobRecord, JobState, region_of
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.keys import JOB_KEY
from animfleet.region.status import read_region_status
from launcher.local_fleet import LocalFleet

REGIONS = ("lt-a", "lt-b", "lt-c")
LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000, help="accepted jobs to submit")
    parser.add_argument("--workers", type=int, default=4, help="workers per region")
    parser.add_argument("--job-seconds", type=float, default=0.5, help="stand-in time per job")
    parser.add_argument("--jitter", type=float, default=0.3, help="relative spread of that time")
    parser.add_argument("--load", type=float, default=0.5, help="base rate / fleet capacity")
    parser.add_argument("--spike", type=float, default=3.0, help="spike rate / base rate")
    parser.add_argument("--deadline", type=float, default=600.0, help="each job's deadline, s")
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--root", default="run/loadtest")
    parser.add_argument("--out", default="out/loadtest")
    parser.add_argument(
        "--mode", choices=["both", "backlog", "retry"], default="both", help="admission policy"
    )
    return parser.parse_args(argv)


def run_locust(fleet: LocalFleet, args: argparse.Namespace, ids_file: Path, out: Path) -> None:
    capacity = len(REGIONS) * args.workers / args.job_seconds  # jobs/s the fleet can finish
    env = {
        **os.environ,
        "LOADTEST_GATEWAYS": ",".join(f"{r}={fleet.gateway_url(r)}" for r in REGIONS),
        "LOADTEST_JOBS": str(args.jobs),
        "LOADTEST_BASE_RATE": str(capacity * args.load),
        "LOADTEST_SPIKE": str(args.spike),
        "LOADTEST_DEADLINE_S": str(args.deadline),
        "LOADTEST_OUT": str(ids_file),
    }
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless"]
    argv += ["--csv", str(out / "locust"), "--only-summary", "--loglevel", "WARNING"]
    subprocess.run(argv, env=env, check=False)


def read_ids(ids_file: Path) -> dict[str, tuple[str, float]]:
    jobs: dict[str, tuple[str, float]] = {}
    for line in ids_file.read_text().splitlines():
        job_id, home, submitted_at = line.split()
        jobs[job_id] = (home, float(submitted_at))
    return jobs


def all_records(fleet: LocalFleet) -> list[str]:
    """Every job id with a record in any region: what the fleet accepted, answered or not."""
    ids: list[str] = []
    for region in REGIONS:
        store = JobStore.from_url(fleet.redis_url(region))
        ids += [key.decode()[len(JOB_KEY) :] for key in store.redis.scan_iter(JOB_KEY + "*")]
    return ids


def drain(
    fleet: LocalFleet, job_ids: list[str], timeout: float
) -> tuple[dict[str, JobRecord], list[str]]:
    """Records of the jobs once all are terminal (or ``timeout`` passed); and the ids missing."""
    stores = {region: JobStore.from_url(fleet.redis_url(region)) for region in REGIONS}
    records: dict[str, JobRecord] = {}
    missing: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for job_id in job_ids:
            if job_id in records and records[job_id].status.terminal:
                continue
            try:
                record = stores[region_of(job_id)].get(job_id)
                if record.region != region_of(job_id):  # spilled from its home backlog
                    record = stores[record.region].get(job_id)
                records[job_id] = record
            except JobNotFound:
                missing.append(job_id)
        open_jobs = [j for j, r in records.items() if not r.status.terminal]
        if (not open_jobs and not missing) or time.monotonic() > deadline:
            return records, missing
        print(f"draining: {len(open_jobs)} open, {len(missing)} missing", flush=True)
        time.sleep(5)


def report(
    jobs: dict[str, tuple[str, float]],
    records: dict[str, JobRecord],
    missing: list[str],
    locust_csv: Path,
    args: argparse.Namespace,
) -> dict[str, object]:
    counts = Counter(r.status.value for r in records.values())
    terminal = sum(counts[s.value] for s in JobState if s.terminal)
    open_jobs = sum(1 for r in records.values() if not r.status.terminal)
    done = [r for r in records.values() if r.completed_at is not None]
    ok = [
        r
        for r in records.values()
        if r.status is JobState.SUCCEEDED
        and r.completed_at is not None
        and r.completed_at <= (r.deadline or float("inf"))
    ]
    latency = np.array(
        [r.completed_at - jobs[r.id][1] for r in ok if r.id in jobs and r.completed_at is not None]
    )
    total = len(set(jobs) | set(records))  # accepted as the client saw it, or as the fleet did
    first = min(submitted for _, submitted in jobs.values())
    last = max(r.completed_at or 0.0 for r in done)
    spilled = sum(1 for r in records.values() if r.region != r.home_region)
    requests = 0
    if locust_csv.exists():
        with locust_csv.open() as stats:
            for row in csv.DictReader(stats):
                if row["Name"] == "POST /v1/jobs":
                    requests = int(row["Request Count"])
    result: dict[str, object] = {
        "fleet": f"{len(REGIONS)} regions x {args.workers} workers, stand-in "
        f"{args.job_seconds}s +-{args.jitter:.0%}, base load {args.load:.0%} of capacity, "
        f"spike x{args.spike}",
        "submitted": total,
        "succeeded": counts["succeeded"],
        "failed": counts["failed"],
        "canceled": counts["canceled"],
        "expired": counts["expired"],
        "unaccounted": total - terminal,
        "still_open": open_jobs,
        "missing_records": len(missing),
        "success_within_deadline": len(ok) / total,
        "throughput_jobs_per_s": len(ok) / (last - first),
        "latency_p50_s": float(np.percentile(latency, 50)),
        "latency_p99_s": float(np.percentile(latency, 99)),
        "latency_max_s": float(latency.max()),
        "spillover_share": spilled / total,
        "submit_requests": requests,
        # Submits answered 429/503 and sent again after Retry-After (locust's request count).
        "submits_retried_after_429_503": max(0, requests - len(jobs)),
        "error_codes": dict(Counter(r.error.code for r in records.values() if r.error)),
        "wall_s": last - first,
    }
    return result


def plot(jobs: dict[str, tuple[str, float]], records: dict[str, JobRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = min(submitted for _, submitted in jobs.values())
    points = sorted(
        (jobs[r.id][1] - first, r.completed_at - jobs[r.id][1], r.region != r.home_region)
        for r in records.values()
        if r.id in jobs and r.completed_at is not None and r.status is JobState.SUCCEEDED
    )
    t = np.array([p[0] for p in points])
    lat = np.array([p[1] for p in points])
    spill = np.array([p[2] for p in points])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.scatter(t[~spill], lat[~spill], s=2, alpha=0.3, label="ran at home")
    top.scatter(t[spill], lat[spill], s=2, alpha=0.3, label="spilled")
    bins = np.arange(0, t.max() + 10, 10)
    index = np.digitize(t, bins)
    centers, p50, p99 = [], [], []
    for i in range(1, len(bins) + 1):
        window = lat[index == i]
        if len(window):
            centers.append(bins[i - 1] + 5)
            p50.append(np.percentile(window, 50))
            p99.append(np.percentile(window, 99))
    top.plot(centers, p50, color="black", label="p50 (10 s windows)")
    top.plot(centers, p99, color="red", label="p99 (10 s windows)")
    top.set_ylabel("end-to-end latency (s)")
    top.legend(loc="upper left")
    bottom.hist(t, bins=bins, color="gray")
    bottom.set_ylabel("accepted jobs per 10 s")
    bottom.set_xlabel("submit time (s since the first submit)")
    fig.suptitle("animfleet load test: latency over time (spike in the middle)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


class BacklogPeak:
    """Samples the fleet's total backlog every half second while the load runs."""

    def __init__(self, fleet: LocalFleet) -> None:
        self.fleet, self.peak = fleet, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        stores = {r: JobStore.from_url(self.fleet.redis_url(r)) for r in REGIONS}
        while not self._stop.wait(0.5):
            total = sum(
                read_region_status(store.redis, self.fleet.topology.region(r)).backlog
                for r, store in stores.items()
            )
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = ["retry", "backlog"] if args.mode == "both" else [args.mode]
    results = {mode: run_mode(args, mode, Path(args.out) / mode) for mode in modes}
    rows = [
        ("submit success rate", "submit_success_rate", "{:.1%}"),
        ("end-to-end p50 s", "latency_p50_s", "{:.2f}"),
        ("end-to-end p99 s", "latency_p99_s", "{:.2f}"),
        ("success within deadline", "success_within_deadline", "{:.1%}"),
        ("jobs lost", "jobs_lost", "{}"),
        ("backlog peak", "backlog_peak", "{}"),
        ("submits answered 429/503", "submits_retried_after_429_503", "{}"),
        ("throughput jobs/s", "throughput_jobs_per_s", "{:.1f}"),
    ]
    print(f"\n{'same spike, policy:':<28}" + "".join(f"{mode:>12}" for mode in modes))
    for label, key, form in rows:
        values = "".join(f"{form.format(results[mode][key]):>12}" for mode in modes)
        print(f"{label:<28}{values}")
    (Path(args.out) / "compare.json").write_text(json.dumps(results, indent=2))
    return 0 if all(result["jobs_lost"] == 0 for result in results.values()) else 1


def run_mode(args: argparse.Namespace, mode: str, out: Path) -> dict[str, object]:
    """One fleet, one spike, one policy; the report of :func:`report` plus the backlog peak."""
    out.mkdir(parents=True, exist_ok=True)
    ids_file = out / "accepted.txt"
    ids_file.write_text("")
    service_env = {
        # A spike should queue and back off, not be refused at once.
        "ANIMFLEET_ADMISSION_ALLOWANCE": "1",
        "ANIMFLEET_GATEWAY_THREADS": "64",
        "ANIMFLEET_ADMISSION_BACKLOG": "1" if mode == "backlog" else "0",
    }
    with LocalFleet(
        Path(args.root) / mode,
        regions=REGIONS,
        storage="local",
        workers_per_region=args.workers,
        model_dir=Path(f"standin:{args.job_seconds}:{args.jitter}"),
        animator="tests.fixtures.standin:StandinAnimator",  # holds each job's time, no model
        gateway=True,
        webhooks=True,
        router_period_s=1.0,
        service_env=service_env,
    ) as fleet:
        started = time.time()
        sampler = BacklogPeak(fleet)
        run_locust(fleet, args, ids_file, out)
        peak = sampler.stop()
        print(f"{mode}: load generated in {time.time() - started:.0f}s; draining", flush=True)
        jobs = read_ids(ids_file)
        # The fleet's side of the count: a job recorded whose 202 never reached the client
        # must end too, and is reported.
        unanswered = sorted(set(all_records(fleet)) - set(jobs))
        records, missing = drain(fleet, list(jobs) + unanswered, args.drain_timeout)
    result = report(jobs, records, missing, out / "locust_stats.csv", args)
    result["recorded_but_never_answered"] = len(unanswered)
    result["backlog_peak"] = peak
    requests = int(str(result["submit_requests"])) or len(jobs)
    result["submit_success_rate"] = len(jobs) / max(requests, len(jobs), 1)
    result["jobs_lost"] = int(str(result["unaccounted"])) + len(missing)
    (out / "report.json").write_text(json.dumps(result, indent=2))
    plot(jobs, records, out / "latency.png")
    width = max(len(k) for k in result)
    print(f"\n{mode}:")
    for key, value in result.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}")
    print(f"report: {out / 'report.json'}  plot: {out / 'latency.png'}")
    return result


if __name__ == "__main__":
    sys.exit(main())
