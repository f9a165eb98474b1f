"""The hand-off when saturated, on a real local fleet (``make bench-placement``).

One region: a private Redis, ``--workers`` Celery worker processes serving the model stand-in
(:mod:`tests.fixtures.standin`) with its template cache (a job whose image the worker has not
prepared recently costs ``--template-seconds`` more; each worker holds its last ``--held``
images and claims them as real workers do), the sweeper, and the scheduler process, restarted
for each arm:

- ``fleet``: the scheduler's hand-off off. Placement is the dispatcher's: an idle worker
  holding the image takes the job; when every worker is busy the job waits in the backlog and
  goes to whichever worker frees first.
- ``handoff``: the scheduler gives a freed worker the backlog job it holds warm (within each
  tenant's first ``ANIMFLEET_SCHEDULER_HANDOFF_WINDOW`` jobs, fair share and bypass limit kept).

Jobs arrive as a Poisson stream at ``--load`` times the fleet's rate with every image warm
(the load the simulator ``make sim-templates`` uses), measured first in the same run: a burst
of jobs of one image, each worker's time from one start to its next (the stand-in's time plus
everything the fleet adds per job on this machine). Their images are
Zipf-popular over ``--images`` pictures and their tenants drawn by the weights. Each round runs
the same trace on both arms (who goes first alternates), each arm with pictures of its own, so
every arm starts cold. Then each arm takes a burst of both tenants' jobs at once: the share of
starts each tenant gets while both wait is its fair share. Printed: per arm the mean and p95
latency (submit to done), the share of warm runs, jobs lost; the median over rounds of the
ratio handoff / fleet; the shares against the weights; PASS when the ratio is <= 0.5, each
share is within 10% of its weight's and nothing was lost.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import redis
from PIL import Image

from animfleet import logs
from animfleet.jobs import JobRecord, JobState
from animfleet.region.keys import JOB_KEY, SCHEDULER_LEASE
from dispatcher.client import Client
from launcher.local_fleet import LocalFleet
from tests.fixtures.standin import ANIMATOR as STANDIN

REGION = "pl"
ARMS = ("fleet", "handoff")
JOB: dict[str, Any] = {"frames": 4, "width": 32, "height": 32, "fps": 8}


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the segment starts
    image: int  # index into the segment's pictures
    tenant: str


@dataclass(frozen=True)
class Segment:
    arm: str
    latencies: list[float]
    warm: float  # share of runs that paid no template preparation
    lost: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--job-seconds", type=float, default=0.6, help="a warm job's time")
    parser.add_argument("--template-seconds", type=float, default=0.6, help="a cold image's")
    parser.add_argument("--held", type=int, default=6, help="images one worker holds")
    parser.add_argument("--images", type=int, default=24, help="pictures per segment")
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--segment-s", type=float, default=40.0, help="arrivals per arm-round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--weights", default="a:2,b:1")
    parser.add_argument("--burst", type=int, default=24, help="jobs per tenant, fair share")
    parser.add_argument("--root", default="run/bench-placement")
    return parser.parse_args(argv)


def picture(seed: int) -> bytes:
    """A small PNG of its own: noise drawn from ``seed``."""
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def trace(
    args: argparse.Namespace, weights: dict[str, float], seed: int, warm_s: float
) -> list[Arrival]:
    rng = random.Random(seed)
    rate = args.load * args.workers / warm_s
    popularity = [1 / (rank + 1) ** args.zipf for rank in range(args.images)]
    tenants, shares = list(weights), list(weights.values())
    at, arrivals = 0.0, list[Arrival]()
    while True:
        at += rng.expovariate(rate)
        if at >= args.segment_s:
            return arrivals
        image = rng.choices(range(args.images), popularity)[0]
        arrivals.append(Arrival(at, image, rng.choices(tenants, shares)[0]))


class Bench:
    def __init__(self, fleet: LocalFleet, args: argparse.Namespace) -> None:
        self.fleet, self.args = fleet, args
        self.redis = redis.Redis.from_url(fleet.redis_url(REGION))
        self.client = Client(fleet.topology)
        self.pictures = 0  # pictures drawn so far: each segment gets fresh ones
        self.arm = ""

    def use(self, arm: str) -> None:
        """Restart the scheduler with the arm's hand-off setting and wait for it to lead."""
        if "scheduler" in self.fleet.processes:
            self.fleet.stop_process("scheduler")
        self.fleet.service_env["ANIMFLEET_SCHEDULER_HANDOFF"] = "1" if arm == "handoff" else "0"
        self.fleet.start_scheduler()
        deadline = time.monotonic() + 60
        while self.redis.get(SCHEDULER_LEASE + REGION) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the scheduler did not take the region's lease in 60 s")
            time.sleep(0.1)
        self.arm = arm

    def fresh_pictures(self) -> list[bytes]:
        first, self.pictures = self.pictures, self.pictures + self.args.images
        return [picture(seed) for seed in range(first, self.pictures)]

    def submit(self, image: bytes, tenant: str) -> str:
        return self.client.submit(image, "sway", tenant=tenant, **JOB).id

    def drain(self, ids: list[str], timeout: float = 600.0) -> list[JobRecord]:
        deadline = time.monotonic() + timeout
        while True:
            raw = self.redis.mget([JOB_KEY + job_id for job_id in ids])
            records = [JobRecord.model_validate_json(r) for r in raw if r is not None]
            if len(records) == len(ids) and all(r.status.terminal for r in records):
                return records
            if time.monotonic() > deadline:
                return records  # the ones missing or unfinished count as lost
            time.sleep(0.25)

    def segment(self, arrivals: list[Arrival]) -> Segment:
        images = self.fresh_pictures()
        start, ids = time.monotonic(), []
        for arrival in arrivals:
            time.sleep(max(0.0, start + arrival.at - time.monotonic()))
            ids.append(self.submit(images[arrival.image], arrival.tenant))
        records = self.drain(ids)
        done = [r for r in records if r.status is JobState.SUCCEEDED]
        cold_above = self.args.job_seconds * 1.1 + self.args.template_seconds / 2
        runs = [r.completed_at - r.started_at for r in done if r.completed_at and r.started_at]
        return Segment(
            self.arm,
            [r.completed_at - r.created_at for r in done if r.completed_at],
            sum(run < cold_above for run in runs) / max(1, len(runs)),
            len(ids) - len(done),
        )

    def warm_seconds(self) -> float:
        """A warm job's time per worker, start to next start, at saturation (median)."""
        image = picture(10**9)  # no segment draws this seed
        ids = [self.submit(image, "a") for _ in range(self.args.workers * 6)]
        records = [r for r in self.drain(ids) if r.started_at and r.worker]
        gaps = []
        for worker in {r.worker for r in records}:
            starts = sorted(r.started_at or 0.0 for r in records if r.worker == worker)
            gaps += [b - a for a, b in itertools.pairwise(starts[1:])]  # the first ran cold
        return statistics.median(gaps)

    def shares(self, weights: dict[str, float]) -> tuple[dict[str, float], int]:
        """Each tenant's share of the starts while every tenant still had jobs waiting, from a
        burst of ``--burst`` jobs per tenant submitted at once; and the jobs lost."""
        images = self.fresh_pictures()
        rng = random.Random(7)
        popularity = [1 / (rank + 1) ** self.args.zipf for rank in range(len(images))]
        order = [t for _ in range(self.args.burst) for t in weights]
        ids = [
            self.submit(images[rng.choices(range(len(images)), popularity)[0]], t) for t in order
        ]
        records = self.drain(ids)
        lost = len(ids) - sum(r.status is JobState.SUCCEEDED for r in records)
        started = sorted((r for r in records if r.started_at), key=lambda r: r.started_at or 0)
        # Until the first tenant's last job starts, every tenant had jobs waiting.
        last_start = {t: max(i for i, r in enumerate(started) if r.tenant == t) for t in weights}
        contended = started[self.args.workers : min(last_start.values()) + 1]
        counts = {t: sum(r.tenant == t for r in contended) for t in weights}
        return {t: n / max(1, len(contended)) for t, n in counts.items()}, lost


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure("WARNING")
    weights = {t: float(w) for t, _, w in (p.partition(":") for p in args.weights.split(","))}
    spec = f"standin:{args.job_seconds}:0.1:48:{args.template_seconds}:{args.held}"
    fleet = LocalFleet(
        Path(args.root),
        regions=(REGION,),
        storage="local",
        workers_per_region=args.workers,
        model_dir=Path(spec),
        animator=STANDIN,
        scheduler=False,  # started per arm
        service_env={"ANIMFLEET_SCHEDULER_WEIGHTS": args.weights},
    )
    print(f"bench-placement: {args.workers} workers, {spec}, load {args.load}, "
          f"{args.rounds} rounds x {args.segment_s:.0f} s per arm, weights {weights}")  # fmt: skip
    segments: list[tuple[int, Segment]] = []
    shares: dict[str, dict[str, float]] = {}
    lost = 0
    with fleet:
        bench = Bench(fleet, args)
        try:
            bench.use("fleet")
            warm_s = bench.warm_seconds()
            rate = args.load * args.workers / warm_s
            print(f"  a warm job takes {warm_s:.3f} s start to start: offered {rate:.2f} jobs/s")
            for round_index in range(args.rounds):
                arrivals = trace(args, weights, round_index, warm_s)
                arms = ARMS if round_index % 2 == 0 else ARMS[::-1]
                for arm in arms:
                    bench.use(arm)
                    result = bench.segment(arrivals)
                    segments.append((round_index, result))
                    lost += result.lost
                    mean = statistics.fmean(result.latencies) if result.latencies else 0.0
                    print(f"  round {round_index} {arm:8s} jobs {len(arrivals):4d} "
                          f"mean {mean:6.2f} s  warm {result.warm:.0%}", flush=True)  # fmt: skip
            for arm in ARMS:
                bench.use(arm)
                shares[arm], burst_lost = bench.shares(weights)
                lost += burst_lost
        finally:
            bench.client.close()
    return report(args, weights, segments, shares, lost)


def report(
    args: argparse.Namespace,
    weights: dict[str, float],
    segments: list[tuple[int, Segment]],
    shares: dict[str, dict[str, float]],
    lost: int,
) -> int:
    def of(arm: str) -> list[Segment]:
        return [s for _, s in segments if s.arm == arm]

    print(f"\n{'arm':8s} {'jobs':>5s} {'mean s':>7s} {'p95 s':>7s} {'warm':>5s} {'lost':>4s}")
    for arm in ARMS:
        latencies = sorted(x for s in of(arm) for x in s.latencies)
        p95 = latencies[int(0.95 * (len(latencies) - 1))] if latencies else 0.0
        warm = statistics.fmean(s.warm for s in of(arm))
        print(f"{arm:8s} {len(latencies):5d} {statistics.fmean(latencies):7.2f} {p95:7.2f} "
              f"{warm:5.0%} {sum(s.lost for s in of(arm)):4d}")  # fmt: skip
    ratios = []
    for round_index in range(args.rounds):
        pair = {s.arm: statistics.fmean(s.latencies) for r, s in segments if r == round_index}
        ratios.append(pair["handoff"] / pair["fleet"])
    ratio = statistics.median(ratios)
    print(f"\nmean latency handoff / fleet per round: {', '.join(f'{r:.2f}x' for r in ratios)}")
    print(f"median ratio {ratio:.2f}x (bar <= 0.50x)")
    total = sum(weights.values())
    fair = True
    for arm in ARMS:
        parts = []
        for tenant, weight in weights.items():
            share, due = shares[arm][tenant], weight / total
            parts.append(f"{tenant} {share:.2f} (weight's {due:.2f})")
            fair = fair and (arm != "handoff" or abs(share / due - 1) <= 0.10)
        print(f"fair share {arm:8s}: {', '.join(parts)}")
    load1, load5, _ = os.getloadavg()
    print(f"jobs lost: {lost}; load average {load1:.2f} (1 min), {load5:.2f} (5 min)")
    passed = ratio <= 0.5 and fair and lost == 0
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
