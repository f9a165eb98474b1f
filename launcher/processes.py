"""The fleet's long-running processes, one command each, as the Procfile and the Terraform user
data start them: ``worker``, ``web``, ``webhooks``, ``scheduler``, ``sweeper``, ``router``.

Parsers only at module level; each command imports what it runs once its arguments are checked,
so a bad fleet file or region fails in well under a second, before the slow imports.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from launcher.fleet_args import regions_of, topology_of, unit_in


def cmd_worker(args: argparse.Namespace) -> int:
    # A host of a region split into cells serves its cell: ANIMFLEET_WORKER_CELL says which.
    region = unit_in(topology_of(args), args.region, os.environ.get("ANIMFLEET_WORKER_CELL"))
    from animfleet import logs
    from workers.celery_app import run_worker
    from workers.settings import WorkerSettings

    logs.configure()
    # --batch wins over ANIMFLEET_WORKER_BATCH, checked with the rest of the settings.
    batch = {} if args.batch is None else {WorkerSettings.env_name("batch"): str(args.batch)}
    run_worker(region, WorkerSettings.from_env({**os.environ, **batch}), args.name)
    return 0


def cmd_router(args: argparse.Namespace) -> int:
    from animfleet import logs
    from dispatcher.router import Router

    logs.configure()
    publish = None
    if args.cloudwatch_namespace:
        from dispatcher.routing.cloudwatch import BacklogMetricsPublisher, RegionBacklog

        publisher = BacklogMetricsPublisher(namespace=args.cloudwatch_namespace)

        def publish(status: dict[str, Any]) -> None:
            publisher.publish(
                {
                    name: RegionBacklog(
                        region=name,
                        queue_depth=region.load.queue_depth,
                        live_workers=region.load.live_workers,
                        busy_workers=region.load.busy_workers,
                        oldest_queued_age_s=region.oldest_queued_age_s,
                        backlog=region.backlog,
                    )
                    for name, region in status.items()
                }
            )

    Router(topology_of(args), period_s=args.period, publish_status=publish).run()
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    topology = topology_of(args)
    # A gateway of a split region serves through its first cell: submits name the region and
    # land in the tenant's cell, and a job id names the cell that holds it.
    unit = unit_in(topology, args.region, "")
    from dispatcher.gateway import run_gateway

    run_gateway(topology, unit.name, args.host, args.port)
    return 0


def cmd_webhooks(args: argparse.Namespace) -> int:
    topology = topology_of(args)
    cells = topology.cells_of(args.region) if args.region in topology.groups else []
    if len(cells) > 1:  # a sender per cell (each cell's outbox is in its own store)
        return _one_process_per_cell(args, cells)
    region = unit_in(topology, args.region, "")
    from animfleet import logs
    from workers.webhooks.app import run_webhooks
    from workers.webhooks.settings import WebhookSettings

    logs.configure()
    run_webhooks(region, WebhookSettings.from_env(), args.name)
    return 0


def _one_process_per_cell(args: argparse.Namespace, cells: list[str]) -> int:
    """Run this command once per cell as child processes. SIGTERM and SIGINT reach every
    child; when one exits the others are stopped and its code is ours, so the supervisor
    (systemd, the Procfile's runner) restarts them together."""
    import signal
    import subprocess
    import sys

    argv, skip = [], False
    for arg in sys.argv[1:]:  # this command's line without its --region
        if skip or arg.startswith("--region="):
            skip = False
            continue
        skip = arg == "--region"
        if not skip:
            argv.append(arg)
    children = {
        child.pid: child
        for child in (
            subprocess.Popen([sys.executable, "-m", "launcher", *argv, "--region", cell])
            for cell in cells
        )
    }

    def forward(signum: int, _frame: object) -> None:
        for child in children.values():
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    pid, status = os.wait()
    forward(signal.SIGTERM, None)
    for child in children.values():
        if child.pid != pid:
            child.wait()
    return os.waitstatus_to_exitcode(status)


def cmd_scheduler(args: argparse.Namespace) -> int:
    regions = [region.name for region in regions_of(args, args.region)]
    from animfleet import logs
    from dispatcher.scheduler import run_scheduler

    logs.configure()
    run_scheduler(topology_of(args), regions)
    return 0


def cmd_sweeper(args: argparse.Namespace) -> int:
    regions = [region.name for region in regions_of(args, args.region)]
    from animfleet import logs
    from workers.sweeping import run_sweeper

    logs.configure()
    run_sweeper(topology_of(args), regions)
    return 0


def add_process_commands(sub: Any) -> None:
    """``worker``, ``router``, ``web``, ``webhooks``, ``scheduler``, ``sweeper``."""
    worker = sub.add_parser("worker", help="run a GPU worker for one region (one per GPU)")
    worker.add_argument("--region", required=True, help="the region whose queue it consumes")
    worker.add_argument("--name", help="Celery node name (default: gpu-<region>-<pid>@<host>)")
    worker.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="continuous batching: up to N jobs share one denoising loop and the worker counts "
        "as N slots (default: ANIMFLEET_WORKER_BATCH, else 1: one job per GPU)",
    )
    worker.set_defaults(func=cmd_worker)

    router = sub.add_parser("router", help="compute routing tables from region loads, forever")
    router.add_argument("--period", type=float, default=2.0, help="seconds between tables")
    router.add_argument(
        "--cloudwatch-namespace",
        default=None,
        help="also publish queue depth and backlog per worker to CloudWatch (for autoscaling)",
    )
    router.set_defaults(func=cmd_router)

    web = sub.add_parser("web", help="run the HTTP gateway (job API) for one home region")
    web.add_argument("--region", required=True, help="home region of jobs submitted here")
    web.add_argument("--host", default="127.0.0.1", help="address to listen on")
    web.add_argument("--port", type=int, default=8000, help="port to listen on")
    web.set_defaults(func=cmd_web)

    hooks = sub.add_parser("webhooks", help="run a region's webhook sender (CPU)")
    hooks.add_argument("--region", required=True, help="the region whose webhooks it sends")
    hooks.add_argument("--name", help="Celery node name (default: webhooks-<region>-<pid>@<host>)")
    hooks.set_defaults(func=cmd_webhooks)

    scheduler = sub.add_parser(
        "scheduler", help="move backlog jobs onto GPU queues as GPUs free up (CPU)"
    )
    scheduler.add_argument(
        "--region", action="append", help="a region whose backlog it moves (repeat; default: all)"
    )
    scheduler.set_defaults(func=cmd_scheduler)

    sweeper = sub.add_parser(
        "sweeper", help="requeue a lost worker's jobs, end the ones nothing will run (CPU)"
    )
    sweeper.add_argument(
        "--region", action="append", help="a region it sweeps (repeat; default: all)"
    )
    sweeper.set_defaults(func=cmd_sweeper)
