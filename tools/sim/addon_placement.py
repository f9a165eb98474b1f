"""Add-on-aware placement, simulated: ``python -m tools.sim.addon_placement --out out/sim-addons``.

Jobs arrive (Poisson) at a region of single-concurrency workers; most ask for one add-on, its
name drawn from a Zipf popularity over a catalogue far larger than what one worker holds.
Each worker keeps an LRU of ``capacity`` add-ons in memory; a job whose add-on its worker lacks
first pays ``load_s`` to load it. Two placements:

- ``any``: a job goes to any idle worker, and an idle worker takes the oldest queued job (what
  a shared FIFO queue does);
- ``aware``: an arriving job prefers an idle worker holding its add-on, and an idle worker
  takes the oldest of the first ``window`` queued jobs whose add-on it holds, else the oldest.

Reported per load: add-on hit rate (held when the job starts), mean and p95 latency.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class AddonWorld:
    workers: int = 8
    catalogue: int = 60
    zipf_s: float = 1.1
    addon_share: float = 0.8  # jobs asking for an add-on; the rest run the base model
    capacity: int = 6  # add-ons one worker holds in memory
    service_s: float = 4.0
    load_s: float = 2.0
    window: int = 16  # queued jobs an idle aware worker looks through
    jobs: int = 20_000


@dataclass(frozen=True)
class Outcome:
    policy: str
    load: float
    hit_rate: float
    mean_latency_s: float
    p95_latency_s: float


def _zipf(world: AddonWorld) -> list[float]:
    weights = [1 / (rank + 1) ** world.zipf_s for rank in range(world.catalogue)]
    total = sum(weights)
    return [w / total for w in weights]


def simulate(world: AddonWorld, policy: str, load: float, seed: int = 0) -> Outcome:
    """One run at ``load`` (arrival rate over the fleet's base service rate)."""
    rng = random.Random(seed)
    popularity = _zipf(world)
    rate = load * world.workers / world.service_s
    caches: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(world.workers)]
    idle = set(range(world.workers))
    queue: deque[tuple[float, int | None]] = deque()
    events: list[tuple[float, int, int]] = []  # (time, kind 0 arrival / 1 finish, worker)
    now, arrivals, hits, asked = 0.0, 0, 0, 0
    latencies: list[float] = []

    def start(worker: int, arrived: float, addon: int | None) -> None:
        nonlocal hits, asked
        idle.discard(worker)
        cost = world.service_s
        if addon is not None:
            asked += 1
            cache = caches[worker]
            if addon in cache:
                hits += 1
                cache.move_to_end(addon)
            else:
                cost += world.load_s
                cache[addon] = None
                if len(cache) > world.capacity:
                    cache.popitem(last=False)
        latencies.append(now + cost - arrived)
        heapq.heappush(events, (now + cost, 1, worker))

    heapq.heappush(events, (rng.expovariate(rate), 0, -1))
    while events:
        now, kind, worker = heapq.heappop(events)
        if kind == 0:
            arrivals += 1
            addon = None
            if rng.random() < world.addon_share:
                addon = rng.choices(range(world.catalogue), popularity)[0]
            if arrivals < world.jobs:
                heapq.heappush(events, (now + rng.expovariate(rate), 0, -1))
            if not idle:
                queue.append((now, addon))
                continue
            holders = [w for w in idle if addon is not None and addon in caches[w]]
            chosen = min(holders) if policy == "aware" and holders else rng.choice(sorted(idle))
            start(chosen, now, addon)
            continue
        idle.add(worker)
        if not queue:
            continue
        pick = 0
        if policy == "aware":
            for index in range(min(world.window, len(queue))):
                wanted = queue[index][1]
                if wanted is not None and wanted in caches[worker]:
                    pick = index
                    break
        arrived, addon = queue[pick]
        del queue[pick]
        start(worker, arrived, addon)
    ordered = sorted(latencies)
    return Outcome(
        policy,
        load,
        hits / max(asked, 1),
        sum(ordered) / len(ordered),
        ordered[int(0.95 * (len(ordered) - 1))],
    )


LABELS = {"any": "any", "aware": "aware"}


def plot(outcomes: list[Outcome], path: Path) -> Path:
    from tools.sim.plots import plot_cache_placement

    return plot_cache_placement(outcomes, LABELS, "add-on", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sim.addon_placement")
    parser.add_argument("--out", default="out/sim-addons")
    parser.add_argument("--loads", default="0.5,0.6,0.7,0.8,0.85,0.9")
    args = parser.parse_args(argv)
    world = AddonWorld()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = [
        simulate(world, policy, float(load))
        for load in args.loads.split(",")
        for policy in ("any", "aware")
    ]
    from tools.sim.plots import report_cache_placement

    document = {"world": asdict(world), "outcomes": [asdict(o) for o in outcomes]}
    report_cache_placement(outcomes, LABELS, "add-on", out, "addons", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
