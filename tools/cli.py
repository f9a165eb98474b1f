"""``animfleet``: run the fleet's processes and its offline tools."""

# Building the parser must stay cheap (``animfleet --help`` in well under a second): this module
# and the parser modules it calls import only the standard library at module level; each command
# imports what it runs.

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from animfleet.topology import Region, Topology
    from dispatcher import Client

from tools.brush_cli import add_region_arguments, regions_from_args
from tools.cli_errors import (
    EX_USAGE,
    CliError,
    problem,
    user_error,
)

EXAMPLE_IMAGE = Path(__file__).with_name("assets") / "example.png"


def _topology(args: argparse.Namespace) -> Topology:
    from animfleet.topology import Topology

    try:
        return Topology.load(args.fleet)
    except FileNotFoundError as error:
        raise CliError(f"fleet file not found: {error.filename}", EX_USAGE) from None
    except OSError as error:
        raise CliError(f"cannot read fleet file {error.filename}: {error.strerror}") from None
    except ValueError as error:  # TOML syntax and pydantic validation errors are ValueErrors
        where = args.fleet or os.environ.get("ANIMFLEET_FLEET_FILE") or "(built-in)"
        raise CliError(f"invalid fleet file {where}: {problem(error)}", EX_USAGE) from None


def _region(topology: Topology, name: str) -> Region:
    try:
        return topology.region(name)
    except KeyError as error:  # its message names the region and the known ones
        raise CliError(str(error.args[0]), EX_USAGE) from None


def cmd_worker(args: argparse.Namespace) -> int:
    region = _region(_topology(args), args.region)  # bad input fails before the slow imports
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

    Router(_topology(args), period_s=args.period, publish_status=publish).run()
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    topology = _topology(args)
    _region(topology, args.region)
    from dispatcher.gateway import run_gateway

    run_gateway(topology, args.region, args.host, args.port)
    return 0


def cmd_webhooks(args: argparse.Namespace) -> int:
    region = _region(_topology(args), args.region)
    from animfleet import logs
    from workers.webhooks.app import run_webhooks
    from workers.webhooks.settings import WebhookSettings

    logs.configure()
    run_webhooks(region, WebhookSettings.from_env(), args.name)
    return 0


def _regions(args: argparse.Namespace) -> tuple[Topology, list[str]]:
    """The topology and the ``--region`` names given (default: all), each checked."""
    topology = _topology(args)
    regions = args.region or topology.names
    for name in regions:
        _region(topology, name)
    return topology, regions


def cmd_scheduler(args: argparse.Namespace) -> int:
    topology, regions = _regions(args)
    from animfleet import logs
    from dispatcher.scheduler import run_scheduler

    logs.configure()
    run_scheduler(topology, regions)
    return 0


def cmd_sweeper(args: argparse.Namespace) -> int:
    topology, regions = _regions(args)
    from animfleet import logs
    from workers.sweeping import run_sweeper

    logs.configure()
    run_sweeper(topology, regions)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    topology = _topology(args)  # a bad fleet file or region fails before the slow imports
    if args.region is not None:
        _region(topology, args.region)
    try:
        image = Path(args.image).read_bytes()
    except FileNotFoundError:
        raise CliError(f"image not found: {args.image}", EX_USAGE) from None
    except OSError as error:
        raise CliError(f"cannot read image {args.image}: {error.strerror}", EX_USAGE) from None
    with _client(topology) as client:
        job = client.submit(
            image,
            args.prompt,
            home_region=args.region,
            frames=args.frames,
            fps=args.fps,
            **({"width": args.size, "height": args.size} if args.size else {}),
            **brushed(args),
        )
        print(job.id, flush=True)
        if args.wait:
            print(client.wait(job.id, args.wait).model_dump_json(indent=2))
    return 0


def brushed(args: argparse.Namespace) -> dict[str, Any]:
    """The submit's motion-brush options: its regions and loop, when given."""
    regions = regions_from_args(args)
    return {**({"regions": regions} if regions else {}), **({"loop": True} if args.loop else {})}


@contextlib.contextmanager
def _client(topology: Topology) -> Iterator[Client]:
    """A dispatcher client for one command, its routing refresh stopped afterwards."""
    from dispatcher import Client

    client = Client(topology)
    try:
        yield client
    finally:
        client.close()


def cmd_get(args: argparse.Namespace) -> int:
    with _client(_topology(args)) as client:
        print(client.get(args.job_id).model_dump_json(indent=2))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(_topology(args)) as client:
        record = client.cancel(args.job_id)
    # A job that had finished already keeps its status: print what it is now, not "canceled".
    print(record.status.value)
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
    from tools.demo import demo_photo, run_demo

    return run_demo(
        root=Path(args.root),
        image=Path(args.image) if args.image else demo_photo(),
        prompt=args.prompt,
        storage=args.storage,
        frames=args.frames,
        out=Path(args.out),
        size=args.size,
        brush=args.brush,
    )


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none (None, or off for a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help shows defaults; its subcommands' parsers are the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked, keeping ``--help`` fast."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("animfleet")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "unknown (not installed)"
        print(f"{parser.prog} {found}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    # Only argument definitions here and in the add_*_arguments/add_commands helpers: building
    # the parser runs on every command, --help included.
    from tools.deploy_cli import add_deploy_commands
    from tools.keys import add_keys_commands
    from tools.model_cli import add_model_commands
    from tools.sim.cli import add_commands as add_simulation_commands
    from tools.usage_cli import add_usage_command

    parser = _Parser(
        prog="animfleet", description="Run the fleet's processes and its offline tools."
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument(
        "--fleet", help="topology file (default: $ANIMFLEET_FLEET_FILE or the built-in one)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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

    add_model_commands(sub)  # model init|tune|compile|push|list|show, train, distill, eval, ...

    submit = sub.add_parser("submit", help="submit an image to the fleet; prints the job id")
    submit.add_argument("image", help="PNG, JPEG or WebP file")
    submit.add_argument("prompt", help="the motion to animate, e.g. 'pan left slowly'")
    submit.add_argument("--region", help="home region (default: the first in the topology)")
    submit.add_argument("--frames", type=int, default=8, help="frames of the animation")
    submit.add_argument("--fps", type=int, default=8, help="frames per second")
    submit.add_argument(
        "--size",
        type=int,
        help="width and height, pixels (default: 512 on the long side, the image's aspect ratio)",
    )
    submit.add_argument("--wait", type=float, default=0, help="seconds to wait for the result")
    add_region_arguments(submit)  # --region-mask, --stroke, --kind, ..., --regions, --loop
    submit.set_defaults(func=cmd_submit)

    get = sub.add_parser("get", help="print a job record")
    get.add_argument("job_id", help="the id that submit printed")
    get.set_defaults(func=cmd_get)

    cancel = sub.add_parser("cancel", help="cancel a job; prints its resulting status")
    cancel.add_argument("job_id", help="the id that submit printed")
    cancel.set_defaults(func=cmd_cancel)

    local = sub.add_parser("local", help="embedded local fleet").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    up = local.add_parser("up", help="start Redis, storage and workers until Ctrl-C")
    up.add_argument("--root", default="run/local", help="state directory")
    up.add_argument(
        "--storage", choices=["local", "s3"], default="s3", help="local directory or SeaweedFS S3"
    )
    up.add_argument("--workers", type=int, default=1, help="workers per region")
    up.add_argument(
        "--no-api", action="store_true", help="no HTTP gateway and webhook sender per region"
    )
    up.set_defaults(func=cmd_local_up)

    demo = sub.add_parser("demo", help="start a local fleet, animate the example image, stop")
    demo.add_argument("--root", default="run/demo", help="state directory")
    demo.add_argument("--image", help="image to animate (default: matplotlib's sample photograph)")
    demo.add_argument("--size", type=int, default=512, help="width and height of the video")
    demo.add_argument("--prompt", default="pan left slowly", help="the motion to animate")
    demo.add_argument(
        "--storage", choices=["local", "s3"], default="s3", help="local directory or SeaweedFS S3"
    )
    demo.add_argument("--frames", type=int, default=8, help="frames of the animation")
    demo.add_argument("--out", default="out/demo", help="where the MP4 goes")
    demo.add_argument("--brush", action="store_true", help="instead: the motion-brush loop")
    demo.set_defaults(func=cmd_demo)

    add_simulation_commands(sub)  # simulate, plan
    add_keys_commands(sub)  # keys create|list|revoke|rotate
    add_deploy_commands(sub)  # deploy set|apply|promote|status
    add_usage_command(sub)  # usage --tenant T [--csv]
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = args.func if hasattr(args, "func") else args.handler
    try:
        result: int = run(args)
    except Exception as error:
        known = user_error(error)
        if known is None:
            raise
        message, code = known
        print(f"animfleet: error: {message}", file=sys.stderr)
        return code
    return result


if __name__ == "__main__":
    sys.exit(main())
