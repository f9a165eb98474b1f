"""The simulator's named scenarios: what world, what traffic, which policies, which window."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dispatcher.admission import AdmissionSettings
from tools.sim.engine import SimConfig
from tools.sim.policies import POLICIES, RetryMode
from tools.sim.service import ServiceTime
from tools.sim.traffic import Diurnal, Floats, Spike, Steady, TraceRates, TrafficModel
from tools.sim.world import SITES, World, make_world

SECONDS_PER_DAY = 86400.0
DIURNAL_AMPLITUDE = 0.6


@dataclass(frozen=True)
class Scenario:
    """Runs to compare, and the window (and home region) the headline table is about.

    ``onset`` is the part of the window before the router's first reaction to it (one router
    period): while the table still reflects the loads before a spike, a policy without a
    fallback confines the spiking region's jobs to its own GPUs.
    """

    name: str
    configs: list[SimConfig]
    window: tuple[float, float]
    focus: str | None = None
    onset: tuple[float, float] | None = None


@dataclass(frozen=True)
class Scaled:
    """``model`` with every rate multiplied by ``factor`` (the sampled mode's traffic slice)."""

    model: TrafficModel
    factor: float

    @property
    def regions(self) -> Sequence[str]:
        return self.model.regions

    def rates(self, t: Floats) -> Floats:
        return self.model.rates(t) * self.factor


def sampled(config: SimConfig, every: int) -> SimConfig:
    """A 1/``every`` slice of the deployment: every region keeps 1/``every`` of its GPUs and
    of its traffic. Cheaper by ``every``; smaller regions block a little more often."""
    if every == 1:
        return config
    gpus = {name: max(1, round(count / every)) for name, count in config.world.gpus.items()}
    world = replace(config.world, gpus=gpus)
    return replace(config, world=world, traffic=Scaled(config.traffic, 1.0 / every))


def compare(
    world: World,
    traffic: TrafficModel,
    duration_s: float,
    policies: Sequence[str],
    modes: Sequence[str],
    admission: AdmissionSettings,
    service: ServiceTime,
    seed: int,
    **options: float,
) -> list[SimConfig]:
    """One config per (policy, retry mode)."""
    naive = RetryMode.naive(attempts=admission.max_attempts)
    retry = {"naive": naive, "backoff": RetryMode.backoff(admission)}
    return [
        SimConfig(
            world,
            traffic,
            duration_s,
            POLICIES[p],
            retry[m],
            admission,
            service,
            seed=seed,
            **options,
        )
        for p in policies
        for m in modes
    ]


def spike(
    regions: int = 10,
    gpus: int = 100,
    multiplier: float = 1.5,
    spike_s: float = 600.0,
    base_utilization: float = 0.6,
    policies: Sequence[str] = tuple(POLICIES),
    modes: Sequence[str] = ("naive", "backoff"),
    admission: AdmissionSettings | None = None,
    service: ServiceTime | None = None,
    seed: int = 0,
) -> Scenario:
    """``us-east`` jumps to ``multiplier`` x its GPU capacity for ``spike_s``; every other
    region stays at ``base_utilization``. Two quiet minutes before and after. The spike starts
    on a router tick, so the first table to see it comes one router period later."""
    service = service or ServiceTime()
    admission = admission or AdmissionSettings()
    world = make_world(regions, gpus)
    full = gpus / service.mean_s
    base = Steady(world.names, {name: base_utilization * full for name in world.names})
    lead = 120.0
    traffic = Spike(base, "us-east", lead, spike_s, multiplier * full)
    # One-second bins resolve the spike's onset (the first router period); latency percentiles
    # stay per 10-second block.
    configs = compare(
        world,
        traffic,
        lead + spike_s + 120.0,
        policies,
        modes,
        admission,
        service,
        seed,
        sample_period_s=1.0,
    )
    period = configs[0].router_period_s if configs else 0.0
    return Scenario("spike", configs, (lead, lead + spike_s), "us-east", (lead, lead + period))


def daily_world(
    regions: int, requests_per_day: float, service: ServiceTime
) -> tuple[World, Diurnal]:
    """``regions`` sites sharing ``requests_per_day`` by weight on a daily cosine, each with
    GPUs for 80% utilization at its own peak."""
    names = list(SITES)[:regions]
    weight = sum(SITES[n][3] for n in names)
    mean = {n: requests_per_day / SECONDS_PER_DAY * SITES[n][3] / weight for n in names}
    gpus = {n: math.ceil(mean[n] * (1 + DIURNAL_AMPLITUDE) * service.mean_s / 0.8) for n in names}
    world = make_world(regions, gpus)
    traffic = Diurnal(world.names, mean, world.utc_offset_h, DIURNAL_AMPLITUDE)
    return world, traffic


def diurnal(
    regions: int = 20,
    requests_per_day: float = 100e6,
    hours: float = 24.0,
    sample_every: int = 1,
    policies: Sequence[str] = ("ring-router",),
    modes: Sequence[str] = ("backoff",),
    admission: AdmissionSettings | None = None,
    service: ServiceTime | None = None,
    seed: int = 0,
    name: str = "diurnal",
) -> Scenario:
    """A day (or its first ``hours``) of diurnal traffic, as a 1/``sample_every`` slice."""
    service = service or ServiceTime()
    admission = admission or AdmissionSettings()
    world, traffic = daily_world(regions, requests_per_day, service)
    options = {"sample_period_s": 60.0, "latency_block_s": 3600.0}
    configs = compare(
        world, traffic, hours * 3600, policies, modes, admission, service, seed, **options
    )
    return Scenario(name, [sampled(c, sample_every) for c in configs], (0.0, hours * 3600))


def sampling_check(
    regions: int = 20,
    requests_per_day: float = 100e6,
    minutes: float = 10.0,
    sample_every: int = 4,
    seed: int = 0,
) -> Scenario:
    """The same ``minutes`` around the fleet's busiest hour, exact and as a sampled slice."""
    service = ServiceTime()
    world, traffic = daily_world(regions, requests_per_day, service)
    grid = np.arange(0.0, SECONDS_PER_DAY, 300.0)
    busiest = float(grid[int(np.argmax(traffic.rates(grid).sum(axis=1)))])
    shifted = replace(
        traffic, utc_offset_h={n: h + busiest / 3600.0 for n, h in traffic.utc_offset_h.items()}
    )
    admission = AdmissionSettings()
    (exact,) = compare(
        world,
        shifted,
        minutes * 60,
        ["ring-router"],
        ["backoff"],
        admission,
        service,
        seed,
        sample_period_s=10.0,
        latency_block_s=60.0,
    )
    return Scenario("sampling-check", [exact, sampled(exact, sample_every)], (60.0, minutes * 60))


def trace(
    model: TraceRates,
    gpus: Mapping[str, int],
    policies: Sequence[str] = tuple(POLICIES),
    modes: Sequence[str] = ("naive", "backoff"),
    service: ServiceTime | None = None,
    seed: int = 0,
) -> Scenario:
    """Replay a trace on the sites it names (they must be among :data:`SITES`)."""
    service = service or ServiceTime()
    world = make_world(list(model.regions), gpus)
    configs = compare(
        world,
        model,
        model.duration_s,
        policies,
        modes,
        AdmissionSettings(),
        service,
        seed,
        sample_period_s=60.0,
        latency_block_s=600.0,
    )
    return Scenario("trace", configs, (0.0, model.duration_s))
