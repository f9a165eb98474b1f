"""The ``simulate`` and ``plan`` subcommands.

Only argument definitions live at module level: ``animfleet --help`` builds these parsers, and the
simulator (numpy, matplotlib, the dispatcher) loads only when a command runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.sim.engine import SimResult
    from tools.sim.scenarios import Scenario
    from tools.sim.traffic import TraceRates

# The names of ``tools.sim.policies.POLICIES``, spelled out so building the parser stays light
# (a test keeps the two in step).
POLICY_NAMES = ("home-only", "least-loaded", "static-spill", "seeds-router", "ring-router")
MODES = ("naive", "backoff")


def _comma_list(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated subset of ``allowed``."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"expected a comma list of {','.join(allowed)}, got {text!r}"
            )
        return names

    return parse


def _simulate_backlog(args: argparse.Namespace) -> int:
    from tools.sim.autoscale import run_all

    for name, summary in run_all(args.out, args.seed).items():
        shown = ", ".join(f"{key} {value:.4g}" for key, value in summary.items())
        print(f"{name}: {shown}  ({args.out / (name + '.png')})")
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``simulate`` and ``plan`` on an ``argparse`` subparsers object."""
    sim = subparsers.add_parser(
        "simulate",
        help="discrete-event simulation of global traffic, routing and retries",
        description="Compare routing policies and retry modes on a simulated global fleet.",
    )
    sim.add_argument(
        "scenario",
        choices=["spike", "diurnal", "scale", "sampling-check", "trace"],
        help="what traffic to simulate",
    )
    sim.add_argument("--out", type=Path, default=Path("out/sim"), help="PNG directory")
    sim.add_argument("--regions", type=int, help="regions (spike: 10, diurnal/scale: 20)")
    sim.add_argument("--gpus", type=int, default=100, help="GPUs per region (spike, trace)")
    sim.add_argument("--multiplier", type=float, default=1.5, help="spike: x home capacity")
    sim.add_argument(
        "--spike-minutes", type=float, default=10.0, help="spike: how long the surge lasts"
    )
    sim.add_argument("--base-utilization", type=float, default=0.6, help="spike: other regions")
    sim.add_argument("--requests-per-day", type=float, default=100e6, help="diurnal, scale")
    sim.add_argument("--hours", type=float, default=24.0, help="diurnal, scale")
    sim.add_argument(
        "--sample-every", type=int, help="simulate a 1/N slice of GPUs and traffic (scale: 4)"
    )
    sim.add_argument("--file", type=Path, help="trace CSV (see tools.sim.traffic)")
    sim.add_argument(
        "--policies",
        type=_comma_list(POLICY_NAMES),
        help=f"comma list of {','.join(POLICY_NAMES)} (default: the scenario's)",
    )
    sim.add_argument(
        "--modes",
        type=_comma_list(MODES),
        help=f"comma list of {','.join(MODES)} (default: the scenario's)",
    )
    _service_args(sim)
    sim.add_argument("--seed", type=int, default=0, help="random seed")
    sim.set_defaults(handler=_simulate)

    autoscale = subparsers.add_parser(
        "simulate-backlog",
        help="one region scaling on its backlog: scale from zero, and a 3x spike",
        description="Play the Terraform scaling policies against traffic; PNG per scenario.",
    )
    autoscale.add_argument("--out", type=Path, default=Path("out/sim"), help="PNG directory")
    autoscale.add_argument("--seed", type=int, default=0, help="random seed")
    autoscale.set_defaults(handler=_simulate_backlog)

    planner = subparsers.add_parser(
        "plan",
        help="GPUs per region for a target p99 and success rate, from a traffic trace",
        description="Size each region for its busiest minute, then check with the simulator.",
    )
    planner.add_argument("--file", type=Path, required=True, help="trace CSV")
    planner.add_argument(
        "--target-p99-s", type=float, default=9.0, help="p99 latency to meet, seconds"
    )
    planner.add_argument(
        "--target-success", type=float, default=0.999, help="share of jobs that must succeed"
    )
    planner.add_argument("--verify-minutes", type=int, default=10, help="0 skips the check")
    stores = planner.add_mutually_exclusive_group()
    stores.add_argument(
        "--redis-capacity", type=float, help="submits/s one Redis serves: also size cells"
    )
    stores.add_argument("--bench", type=Path, help="make bench-cells's result.json: the same")
    planner.add_argument("--tenants", type=int, default=1000, help="cells: tenants per region")
    planner.add_argument("--zipf", type=float, default=1.0, help="cells: tenant skew")
    _service_args(planner)
    planner.add_argument("--seed", type=int, default=0, help="random seed")
    planner.set_defaults(handler=_plan)


def _service_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service-median-s", type=float, default=4.0, help="measured GPU s/job")
    parser.add_argument("--service-p99-s", type=float, default=6.0, help="measured GPU s/job")


def _load_rates(path: Path) -> TraceRates:
    from tools.sim.traffic import TraceEvents, load_trace, per_minute

    model = load_trace(path)
    return per_minute(model) if isinstance(model, TraceEvents) else model


def _simulate(args: argparse.Namespace) -> int:
    from tools.sim.planner import plan
    from tools.sim.scenarios import diurnal, sampling_check, spike, trace
    from tools.sim.service import ServiceTime

    service = ServiceTime(args.service_median_s, args.service_p99_s)
    choice: dict[str, object] = {}
    if args.policies:
        choice["policies"] = args.policies
    if args.modes:
        choice["modes"] = args.modes
    scenario: Scenario
    if args.scenario == "spike":
        scenario = spike(
            regions=args.regions or 10,
            gpus=args.gpus,
            multiplier=args.multiplier,
            spike_s=args.spike_minutes * 60,
            base_utilization=args.base_utilization,
            service=service,
            seed=args.seed,
            **choice,  # type: ignore[arg-type]
        )
    elif args.scenario in ("diurnal", "scale"):
        every = args.sample_every or (4 if args.scenario == "scale" else 1)
        scenario = diurnal(
            regions=args.regions or 20,
            requests_per_day=args.requests_per_day,
            hours=args.hours,
            sample_every=every,
            service=service,
            seed=args.seed,
            name=args.scenario,
            **choice,  # type: ignore[arg-type]
        )
    elif args.scenario == "sampling-check":
        scenario = sampling_check(sample_every=args.sample_every or 4, seed=args.seed)
    else:
        if args.file is None:
            print("simulate trace needs --file", file=sys.stderr)
            return 2
        rates = _load_rates(args.file)
        gpus = {p.region: p.gpus for p in plan(rates, service, 9.0, 0.999)}
        scenario = trace(rates, gpus, service=service, seed=args.seed, **choice)  # type: ignore[arg-type]
    results = _run_all(scenario)
    _report(scenario, results, args.out)
    return 0


def _run_all(scenario: Scenario) -> list[SimResult]:
    from tools.sim.engine import run_exact

    results = []
    for config in scenario.configs:
        began = time.perf_counter()
        result = run_exact(config, progress=True)
        jobs = int(result.record.jobs.sum())
        seconds = time.perf_counter() - began
        print(f"{config.label}: {jobs} jobs in {seconds:.1f} s wall", file=sys.stderr)
        results.append(result)
    return results


def _report(scenario: Scenario, results: list[SimResult], out: Path) -> None:
    from tools.sim.plots import plot_regions, plot_runs
    from tools.sim.scores import excess_share, format_table, summarize
    from tools.sim.spike_checks import spike_checks, whole_spike_notes

    start, stop = scenario.window
    if scenario.focus is not None:
        rows = [summarize(r, scenario.window, scenario.focus) for r in results]
        print(format_table(rows, f"{scenario.focus} jobs submitted during the spike"))
        excess = excess_share(results[0], scenario.window, scenario.focus)
        quiet = max(summarize(r, (0.0, start), scenario.focus).p99_s for r in results)
        print(f"excess over {scenario.focus} capacity: {100 * excess:.2f}% of its traffic")
        print(f"highest p99 of {scenario.focus} before the spike, any run: {quiet:.2f} s\n")
        minute = (start, min(stop, start + 60))
        rows = [summarize(r, minute, scenario.focus) for r in results]
        print(format_table(rows, f"{scenario.focus} jobs of the spike's first minute") + "\n")
        if scenario.onset is not None:
            first, last = scenario.onset
            rows = [summarize(r, scenario.onset, scenario.focus) for r in results]
            title = (
                f"{scenario.focus} jobs of the spike's first router period ({first:g}-{last:g} s;"
                " p50/p99 over its latency block)"
            )
            print(format_table(rows, title) + "\n")
    rows = [summarize(r, scenario.window) for r in results]
    if scenario.name == "sampling-check":
        rows = [
            summarize(r, scenario.window, label=label)
            for r, label in zip(results, ["exact (full fleet)", "sampled slice"], strict=True)
        ]
    print(format_table(rows, "all jobs in the window"))
    if scenario.name == "sampling-check":
        exact, slice_ = rows
        print(
            "sampled - exact: "
            f"success {100 * (slice_.success_rate - exact.success_rate):+.3f} pts, "
            f"p50 {slice_.p50_s - exact.p50_s:+.3f} s, p99 {slice_.p99_s - exact.p99_s:+.3f} s, "
            f"cross {100 * (slice_.cross_region_share - exact.cross_region_share):+.2f} pts, "
            f"GPU {100 * (slice_.gpu_utilization - exact.gpu_utilization):+.2f} pts, "
            f"att/job {slice_.amplification - exact.amplification:+.3f}"
        )
    if scenario.name == "spike":
        print("\nbar (issue 4), spike scenario")
        for check in spike_checks(scenario, results):
            print(check.line)
        for note in whole_spike_notes(scenario, results):
            print(note)
    paths = [plot_runs(results, out / f"{scenario.name}.png", scenario.focus)]
    if scenario.onset is not None:
        zoom = (scenario.onset[0] - 30.0, scenario.onset[0] + 90.0)
        path = out / f"{scenario.name}-onset.png"
        title = f"home region {scenario.focus}, the spike's onset"
        paths.append(plot_runs(results, path, scenario.focus, title, zoom))
    if scenario.focus is None and len(results[0].record.regions) > 1:
        paths.append(plot_regions(results[-1], out / f"{scenario.name}-regions.png"))
    for path in paths:
        print(f"wrote {path}")


def _plan(args: argparse.Namespace) -> int:
    from tools.sim.planner import busiest_stretch, format_plan, plan
    from tools.sim.scenarios import trace
    from tools.sim.scores import format_table, summarize
    from tools.sim.service import ServiceTime

    service = ServiceTime(args.service_median_s, args.service_p99_s)
    rates = _load_rates(args.file)
    plans = plan(rates, service, args.target_p99_s, args.target_success)
    print(format_plan(plans))
    if args.redis_capacity is not None or args.bench is not None:
        from tools.sim.cells import capacity_from_bench, format_cells, peak_rates

        capacity = args.redis_capacity or capacity_from_bench(args.bench)
        print(format_cells(peak_rates(rates), capacity, args.tenants, args.zipf, 0.7))
    if args.verify_minutes > 0:
        stretch = busiest_stretch(rates, args.verify_minutes)
        gpus = {p.region: p.gpus for p in plans}
        scenario = trace(stretch, gpus, ["ring-router"], ["backoff"], service, args.seed)
        (result,) = _run_all(scenario)
        row = summarize(result, scenario.window)
        verdict = row.success_rate >= args.target_success and row.p99_s <= args.target_p99_s
        print(format_table([row], f"\nbusiest {args.verify_minutes} minutes on the plan"))
        print("targets met" if verdict else "targets NOT met: add GPUs or relax the targets")
    return 0
