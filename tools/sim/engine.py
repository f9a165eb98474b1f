"""The exact mode: a discrete-event simulation, one event per job attempt and completion.

The simulated dispatcher runs the production code: the policy writes a routing table every
``router_period_s`` from the loads a router would read (live, busy, queued, and the home
demand it would count), and every attempt calls :func:`dispatcher.admission.choose_region` on
the table in force and on an in-flight view that sees admissions at once and completions
``view_lag_s`` late (the worker heartbeat). Retries ask the tenacity schedule for each sleep.

What a rejected attempt costs, the same under every policy and retry mode: the job's time until
its next attempt (naive retries wait one probe round trip, ``RetryMode.naive``'s ``probe_s``;
backoff waits its jitter) and one of its ``max_attempts``, within the retry budget. It holds
no GPU and no queue place: a refusal is one call of the region's admission script in
production, and was a host's own load check in the seeds, where a host turned away anything
beyond one queued-or-running request. Dispatcher and admission-script throughput is not
modelled (a few hundred refusals a second are far below what one Redis serves), so retries
feed back only through the attempts and time they spend: naive retries use up a job's
attempts within a second, before the router's next table, while backoff spreads them over the
budget and finds GPUs freed, or a new table, meanwhile.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from dispatcher.admission import (
    AdmissionSettings,
    choose_region,
    execution_delay_s,
    source_utilization,
)
from dispatcher.routing import RegionLoad, RoutingTable
from tools.sim.policies import RetryMode, RoutingPolicy
from tools.sim.record import Recorder
from tools.sim.service import ServiceTime
from tools.sim.traffic import Floats, Ints, TrafficModel, arrivals
from tools.sim.world import World

ATTEMPT, COMPLETE, VIEW_RELEASE, ROUTER, SAMPLE = range(5)
FAILED = -1
DRAIN_S = 120.0
CHUNK_S = 60.0


@dataclass(frozen=True)
class SimConfig:
    """One simulation run.

    Args:
        world: regions, GPUs and latency.
        traffic: the submissions per region over time.
        duration_s: simulated seconds of traffic (jobs in flight then are run to completion).
        policy: writes the routing table.
        retry: naive or backoff retries.
        admission: the admission settings (allowance, budget, backoff, execution delay).
        service: GPU seconds per job.
        router_period_s: how often the router rewrites the table.
        view_lag_s: how late the dispatcher's in-flight view sees a completion.
        demand_smoothing: weight of the previous estimate in the router's demand average.
        network_round_trips: round trips between home and the serving region in a job's
            end-to-end latency (input in, result out).
        sample_period_s: spacing of the time series kept for plots.
        latency_block_s: time resolution of the latency histograms (a multiple of the above).
        seed: seeds every random draw (numpy, the dispatcher's rng and tenacity's jitter).
    """

    world: World
    traffic: TrafficModel
    duration_s: float
    policy: RoutingPolicy
    retry: RetryMode
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    service: ServiceTime = field(default_factory=ServiceTime)
    router_period_s: float = 5.0
    view_lag_s: float = 0.25
    demand_smoothing: float = 0.5
    network_round_trips: float = 2.0
    sample_period_s: float = 10.0
    latency_block_s: float = 10.0
    seed: int = 0

    @property
    def label(self) -> str:
        return f"{self.policy.name} + {self.retry.name}"


@dataclass
class SimResult:
    """What one run recorded: aggregated outcomes and per-sample time series."""

    config: SimConfig
    record: Recorder

    @property
    def sample_t(self) -> Floats:
        return np.array(self.record.sample_t)

    @property
    def busy(self) -> Floats:
        """[sample, region] GPUs running a job."""
        return self.record.busy_array()

    @property
    def kept_home(self) -> Floats:
        """[sample, region] the table share each source keeps home."""
        return self.record.kept_home_array()


def _arrival_chunks(
    config: SimConfig, rng: np.random.Generator
) -> Iterator[tuple[Floats, Ints, Floats]]:
    """Submissions in windows of ``CHUNK_S``: times, home indices, GPU seconds."""
    t = 0.0
    while t < config.duration_s:
        stop = min(config.duration_s, t + CHUNK_S)
        times, homes = arrivals(config.traffic, t, stop, rng)
        yield times, homes, config.service.sample(rng, len(times))
        t = stop


def run_exact(config: SimConfig, progress: bool = False) -> SimResult:
    """Simulate every job; see the module docstring for what the dispatcher sees."""
    world, admission = config.world, config.admission
    names = world.names
    index = {name: i for i, name in enumerate(names)}
    latency = [[world.topology.latency(a, b) / 1000.0 for b in names] for a in names]
    trips = config.network_round_trips
    random.seed(config.seed)  # tenacity draws its jitter from the global generator
    rng = random.Random(config.seed)
    chunks = _arrival_chunks(config, np.random.default_rng(config.seed))
    record = Recorder(names, config.duration_s, config.sample_period_s, config.latency_block_s)
    gpus = [world.gpus[name] for name in names]
    live = dict(world.gpus)
    view = dict.fromkeys(names, 0)
    busy = [0] * len(names)
    queues: list[deque[int]] = [deque() for _ in names]
    # job id -> [submitted at, home, first attempt at, attempts, serving region, GPU seconds]
    jobs: dict[int, list[Any]] = {}
    submitted = [0] * len(names)
    demand = [0.0] * len(names)
    schedule = config.retry.schedule
    horizon = config.duration_s + DRAIN_S

    def loads() -> dict[str, RegionLoad]:
        return {
            name: RegionLoad(name, live[name], busy[i], len(queues[i]), demand=demand[i])
            for i, name in enumerate(names)
        }

    table: RoutingTable = config.policy.table(world.topology, loads(), None, 0.0)
    heap: list[tuple[float, int, int, int]] = []
    seq = 0

    def push(t: float, kind: int, payload: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, payload))

    def finish(job: int, t: float) -> None:
        arrival, home, _, tries, region, _ = jobs.pop(job)
        e2e = t - arrival + trips * latency[home][region] if region >= 0 else 0.0
        record.job_done(arrival, home, region, tries, e2e)

    def attempt(job: int, t: float) -> None:
        state = jobs[job]
        if state[3] == 0:
            state[2] = t
        state[3] += 1
        target = choose_region(table, names[state[1]], view, live, rng, admission)
        if target is None:
            sleep = schedule.next_sleep(state[3], t - state[2])
            if sleep is None:
                finish(job, t)
            else:
                push(t + sleep, ATTEMPT, job)
            return
        r = index[target]
        view[target] += 1
        state[4] = r
        if busy[r] < gpus[r]:
            busy[r] += 1
            push(t + state[5], COMPLETE, job)
        else:
            queues[r].append(job)

    push(config.router_period_s, ROUTER, 0)
    push(0.0, SAMPLE, 0)
    empty = (np.empty(0), np.empty(0, dtype=np.int64), np.empty(0))
    times, homes, service = empty
    cursor, next_id = 0, 0
    bar = tqdm(
        total=_expected_jobs(config),
        desc=config.label,
        unit="job",
        disable=not progress,
        mininterval=1,
    )
    exhausted = False
    while True:
        while cursor == len(times) and not exhausted:
            bar.update(cursor)
            chunk = next(chunks, None)
            exhausted = chunk is None
            times, homes, service = empty if chunk is None else chunk
            cursor = 0
        if cursor < len(times) and (not heap or times[cursor] < heap[0][0]):
            t, home = float(times[cursor]), int(homes[cursor])
            job = next_id
            jobs[job] = [t, home, t, 0, -1, float(service[cursor])]
            next_id += 1
            cursor += 1
            submitted[home] += 1
            if config.retry.execution_delay:
                hot = source_utilization(table, names[home], view, live)
                delay = execution_delay_s(hot, rng, admission)
                if delay > 0:
                    push(t + delay, ATTEMPT, job)
                    continue
            attempt(job, t)
            continue
        if not heap:
            break
        t, _, kind, payload = heapq.heappop(heap)
        if kind == ATTEMPT:
            attempt(payload, t)
        elif kind == COMPLETE:
            r = jobs[payload][4]
            finish(payload, t)
            if config.view_lag_s > 0:
                push(t + config.view_lag_s, VIEW_RELEASE, r)
            else:
                view[names[r]] -= 1
            if queues[r]:
                queued = queues[r].popleft()
                push(t + jobs[queued][5], COMPLETE, queued)
            else:
                busy[r] -= 1
        elif kind == VIEW_RELEASE:
            view[names[payload]] -= 1
        elif kind == ROUTER:
            keep = config.demand_smoothing
            for i in range(len(names)):
                rate = submitted[i] / config.router_period_s
                demand[i] = keep * demand[i] + (1 - keep) * rate * config.service.mean_s
                submitted[i] = 0
            table = config.policy.table(world.topology, loads(), table, t)
            if t < horizon:
                push(t + config.router_period_s, ROUTER, 0)
        elif kind == SAMPLE:
            record.sample(t, busy, [table.share(s, s) for s in names])
            if t < horizon:
                push(t + config.sample_period_s, SAMPLE, 0)
    bar.close()
    record.flush()
    return SimResult(config, record)


def _expected_jobs(config: SimConfig) -> int:
    grid = np.arange(0.0, config.duration_s, 10.0) + 5.0
    return int(config.traffic.rates(grid).sum() * 10.0)
