"""Cache-aware placement of jobs with repeated templates, simulated.

``python -m tools.sim.templates --out out/sim-templates``

Jobs arrive (Poisson) at a region of single-concurrency workers. Each job animates an image (a
*template*) drawn from a Zipf popularity, so the same images come back: edits of one picture,
a campaign's hero shot. A worker keeps the templates it prepared (decoded image, latent, image
embedding, unmasked features) in an LRU of ``capacity``; a job whose template its worker lacks
first pays ``load_s`` to prepare it. Three placements, on the same trace:

- ``compute``: compute-only balancing. A job goes to the worker with the least outstanding work
  (an idle one first), blind to caches.
- ``cache``: compute + cache balancing (InstGenIE's rule). A job goes to the worker minimising
  its outstanding work plus ``load_s`` unless the worker holds, or will hold by then (a job ahead
  of it in that worker's queue uses the same template), the job's template.
- ``fleet``: what animfleet's admission does (:mod:`animfleet.region.affinity`): an idle worker
  that holds the template takes the job on its direct queue; else an idle worker takes it from
  the shared queue; when every worker is busy the job waits (backlog, then the shared queue)
  for whichever worker frees up first.

Reported per load: template hit rate, mean and p95 latency; a PNG plots both against load.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

POLICIES = ("compute", "cache", "fleet")


@dataclass(frozen=True)
class TemplateWorld:
    workers: int = 8
    templates: int = 200  # distinct images in the trace
    zipf_s: float = 1.0
    capacity: int = 16  # templates one worker holds in memory
    service_s: float = 3.0  # one job's denoising, decode and encode
    load_s: float = 1.5  # preparing a template the worker lacks
    jobs: int = 20_000


@dataclass(frozen=True)
class Outcome:
    policy: str
    load: float
    hit_rate: float
    mean_latency_s: float
    p95_latency_s: float


@dataclass
class _Worker:
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    queue: deque[tuple[float, int]] = field(default_factory=deque)  # (arrived, template)
    busy_until: float = 0.0
    running: bool = False


def trace(world: TemplateWorld, load: float, seed: int = 0) -> list[tuple[float, int]]:
    """(arrival time, template) of every job: Poisson arrivals at ``load`` times the fleet's
    service rate without loading, templates Zipf-popular."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** world.zipf_s for rank in range(world.templates)]
    rate = load * world.workers / world.service_s
    now, jobs = 0.0, []
    for template in rng.choices(range(world.templates), weights, k=world.jobs):
        now += rng.expovariate(rate)
        jobs.append((now, template))
    return jobs


def simulate(world: TemplateWorld, policy: str, load: float, seed: int = 0) -> Outcome:
    """One run of ``policy`` on the trace at ``load``."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    workers = [_Worker() for _ in range(world.workers)]
    shared: deque[tuple[float, int]] = deque()  # the fleet policy's shared queue
    events: list[tuple[float, int, int, int]] = []  # (time, order, kind 0 arrive / 1 done, w)
    for order, (at, template) in enumerate(trace(world, load, seed)):
        heapq.heappush(events, (at, order, 0, template))
    latencies: list[float] = []
    hits = 0

    def cost(worker: _Worker, template: int) -> float:
        """When ``worker`` could finish a job with ``template`` placed on it now."""
        queued = [t for _, t in worker.queue]
        warm = template in worker.cache or template in queued
        work = sum(world.service_s + (0.0 if t in worker.cache else world.load_s) for t in queued)
        return max(worker.busy_until, now) + work + world.service_s + (0 if warm else world.load_s)

    def start(index: int, arrived: float, template: int) -> None:
        nonlocal hits
        worker = workers[index]
        took = world.service_s
        if template in worker.cache:
            hits += 1
            worker.cache.move_to_end(template)
        else:
            took += world.load_s
            worker.cache[template] = None
            if len(worker.cache) > world.capacity:
                worker.cache.popitem(last=False)
        worker.running, worker.busy_until = True, now + took
        latencies.append(now + took - arrived)
        heapq.heappush(events, (now + took, -1, 1, index))

    while events:
        now, _, kind, value = heapq.heappop(events)
        if kind == 1:  # worker ``value`` finished
            worker = workers[value]
            worker.running = False
            waiting = worker.queue or shared
            if waiting:
                start(value, *waiting.popleft())
            continue
        template = value
        idle = [i for i, w in enumerate(workers) if not w.running]
        if policy == "fleet":
            holders = [i for i in idle if template in workers[i].cache]
            if holders:
                start(holders[0], now, template)
            elif idle:
                start(idle[0], now, template)
            else:
                shared.append((now, template))
            continue
        if policy == "compute":
            chosen = min(
                range(len(workers)),
                key=lambda i: (
                    max(workers[i].busy_until, now) + world.service_s * len(workers[i].queue),
                    i,
                ),
            )
        else:
            chosen = min(range(len(workers)), key=lambda i: (cost(workers[i], template), i))
        if workers[chosen].running:
            workers[chosen].queue.append((now, template))
        else:
            start(chosen, now, template)
    ordered = sorted(latencies)
    return Outcome(
        policy,
        load,
        hits / len(ordered),
        sum(ordered) / len(ordered),
        ordered[int(0.95 * (len(ordered) - 1))],
    )


LABELS = {"compute": "compute only", "cache": "compute + cache", "fleet": "animfleet"}


def plot(outcomes: list[Outcome], path: Path) -> Path:
    from tools.sim.plots import plot_cache_placement

    return plot_cache_placement(outcomes, LABELS, "template", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sim.templates")
    parser.add_argument("--out", default="out/sim-templates")
    parser.add_argument("--loads", default="0.5,0.6,0.7,0.8,0.9")
    parser.add_argument("--jobs", type=int, default=TemplateWorld.jobs)
    args = parser.parse_args(argv)
    world = TemplateWorld(jobs=args.jobs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = [
        simulate(world, policy, float(load))
        for load in args.loads.split(",")
        for policy in POLICIES
    ]
    from tools.sim.plots import report_cache_placement

    document = {"world": asdict(world), "outcomes": [asdict(o) for o in outcomes]}
    report_cache_placement(outcomes, LABELS, "template", out, "templates", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
