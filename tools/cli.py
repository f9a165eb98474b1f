"""``animfleet``: run the fleet's processes and its offline tools."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from animfleet import logs

EXAMPLE_IMAGE = Path(__file__).with_name("assets") / "example.png"


def _topology(args: argparse.Namespace) -> Any:
    from animfleet.topology import Topology

    return Topology.load(args.fleet)


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.celery_app import run_worker
    from workers.settings import WorkerSettings

    logs.configure()
    run_worker(_topology(args).region(args.region), WorkerSettings.from_env(), args.name)
    return 0


def cmd_router(args: argparse.Namespace) -> int:
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
                    )
                    for name, region in status.items()
                }
            )

    Router(_topology(args), period_s=args.period, publish_status=publish).run()
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    from dispatcher.gateway import run_gateway

    run_gateway(_topology(args), args.region, args.host, args.port)
    return 0


def cmd_webhooks(args: argparse.Namespace) -> int:
    from workers.webhooks.app import run_webhooks
    from workers.webhooks.settings import WebhookSettings

    logs.configure()
    run_webhooks(_topology(args).region(args.region), WebhookSettings.from_env(), args.name)
    return 0


def cmd_model_init(args: argparse.Namespace) -> int:
    from workers.model.build import init_model

    path = init_model(args.directory, seed=args.seed)
    print(f"wrote a random-weight pipeline to {path}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from tools.training.cli import train

    return train(args)


def cmd_distill(args: argparse.Namespace) -> int:
    from tools.training.cli import distill

    return distill(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from tools.training.cli import evaluate

    return evaluate(args)


def cmd_submit(args: argparse.Namespace) -> int:
    from dispatcher import Client

    client = Client(_topology(args))
    job = client.submit(
        Path(args.image).read_bytes(),
        args.prompt,
        home_region=args.region,
        frames=args.frames,
        fps=args.fps,
        width=args.size,
        height=args.size,
    )
    print(job.id)
    if args.wait:
        print(client.wait(job.id, args.wait).model_dump_json(indent=2))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from dispatcher import Client

    print(Client(_topology(args)).get(args.job_id).model_dump_json(indent=2))
    return 0


def cmd_local_up(args: argparse.Namespace) -> int:
    from tools.localfleet import LocalFleet

    fleet = LocalFleet(
        Path(args.root),
        storage=args.storage,
        workers_per_region=args.workers,
        gateway=not args.no_api,
        webhooks=not args.no_api,
    )
    with fleet:
        print(f"local fleet up; ANIMFLEET_FLEET_FILE={fleet.fleet_file}  (Ctrl-C stops it)")
        for region in fleet.gateway_ports:
            print(f"  {region}: job API at {fleet.gateway_url(region)}/v1/jobs")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tools.demo import run_demo

    return run_demo(
        root=Path(args.root),
        image=Path(args.image),
        prompt=args.prompt,
        storage=args.storage,
        frames=args.frames,
        out=Path(args.out),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="animfleet", description=__doc__)
    parser.add_argument(
        "--fleet", help="topology file (default: $ANIMFLEET_FLEET_FILE or built-in)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", help="run a GPU worker for one region (one per GPU)")
    worker.add_argument("--region", required=True)
    worker.add_argument("--name", help="Celery node name (default gpu-<region>-<pid>@<host>)")
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
    web.add_argument("--host", default="127.0.0.1")
    web.add_argument("--port", type=int, default=8000)
    web.set_defaults(func=cmd_web)

    hooks = sub.add_parser("webhooks", help="run a region's webhook sender (CPU)")
    hooks.add_argument("--region", required=True)
    hooks.add_argument("--name", help="Celery node name (default webhooks-<region>-<pid>@<host>)")
    hooks.set_defaults(func=cmd_webhooks)

    model = sub.add_parser("model", help="model files").add_subparsers(dest="action", required=True)
    init = model.add_parser("init", help="write a random-weight pipeline directory")
    init.add_argument("directory")
    init.add_argument("--seed", type=int, default=0)
    init.set_defaults(func=cmd_model_init)

    from tools.training.cli import (
        add_distill_arguments,
        add_eval_arguments,
        add_train_arguments,
    )

    train = sub.add_parser("train", help="train the small model (resumable; state in --run)")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)

    distill = sub.add_parser(
        "distill", help="distil the teacher into a one-pass, 8-step student (resumable)"
    )
    add_distill_arguments(distill)
    distill.set_defaults(func=cmd_distill)

    evaluate = sub.add_parser("eval", help="evaluate a model directory on the held-out clips")
    add_eval_arguments(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    submit = sub.add_parser("submit", help="submit an image to the fleet")
    submit.add_argument("image")
    submit.add_argument("prompt")
    submit.add_argument("--region", help="home region (default: the first in the topology)")
    submit.add_argument("--frames", type=int, default=8)
    submit.add_argument("--fps", type=int, default=8)
    submit.add_argument("--size", type=int, default=64)
    submit.add_argument("--wait", type=float, default=0, help="seconds to wait for the result")
    submit.set_defaults(func=cmd_submit)

    get = sub.add_parser("get", help="print a job record")
    get.add_argument("job_id")
    get.set_defaults(func=cmd_get)

    local = sub.add_parser("local", help="embedded local fleet").add_subparsers(
        dest="action", required=True
    )
    up = local.add_parser("up", help="start Redis, storage and workers until Ctrl-C")
    up.add_argument("--root", default="run/local")
    up.add_argument("--storage", choices=["local", "s3"], default="s3")
    up.add_argument("--workers", type=int, default=1, help="workers per region")
    up.add_argument(
        "--no-api", action="store_true", help="no HTTP gateway and webhook sender per region"
    )
    up.set_defaults(func=cmd_local_up)

    demo = sub.add_parser("demo", help="start a local fleet, animate the example image, stop")
    demo.add_argument("--root", default="run/demo")
    demo.add_argument("--image", default=str(EXAMPLE_IMAGE))
    demo.add_argument("--prompt", default="pan left slowly")
    demo.add_argument("--storage", choices=["local", "s3"], default="s3")
    demo.add_argument("--frames", type=int, default=8)
    demo.add_argument("--out", default="out/demo")
    demo.set_defaults(func=cmd_demo)
    from tools.sim.cli import add_commands as add_simulation_commands

    add_simulation_commands(sub)  # simulate, plan
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = args.func if hasattr(args, "func") else args.handler
    result: int = run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
