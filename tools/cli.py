"""``animfleet``: run the fleet's processes and its offline tools."""

# Building the parser must stay cheap (``animfleet --help`` in well under a second): this module
# and the parser modules it calls import only the standard library at module level; each command
# imports what it runs.

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from animfleet.topology import Region, Topology

EXAMPLE_IMAGE = Path(__file__).with_name("assets") / "example.png"

EX_USAGE = 2  # argparse's own code for a bad command line; also bad input
EX_TEMPFAIL = 75  # sysexits.h: try again later (the fleet is at capacity)
EX_CONFIG = 78  # sysexits.h: a configuration error (a bad ANIMFLEET_* variable)


class CliError(Exception):
    """A failure the user can act on: printed as one ``animfleet: error:`` line, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _one_line(error: BaseException) -> str:
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


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
        raise CliError(f"invalid fleet file {where}: {_problem(error)}", EX_USAGE) from None


def _problem(error: ValueError) -> str:
    """pydantic's first error as ``field: message``, else the message on one line."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        return f"{field}: {first['msg']}" if field else str(first["msg"])
    return _one_line(error)


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
    run_worker(region, WorkerSettings.from_env(), args.name)
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
    topology = _topology(args)  # a bad fleet file or region fails before the slow imports
    if args.region is not None:
        _region(topology, args.region)
    try:
        image = Path(args.image).read_bytes()
    except FileNotFoundError:
        raise CliError(f"image not found: {args.image}", EX_USAGE) from None
    except OSError as error:
        raise CliError(f"cannot read image {args.image}: {error.strerror}", EX_USAGE) from None
    from dispatcher import Client

    client = Client(topology)
    try:
        job = client.submit(
            image,
            args.prompt,
            home_region=args.region,
            frames=args.frames,
            fps=args.fps,
            width=args.size,
            height=args.size,
        )
        print(job.id, flush=True)
        if args.wait:
            print(client.wait(job.id, args.wait).model_dump_json(indent=2))
    finally:
        client.close()
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    topology = _topology(args)
    from dispatcher import Client

    client = Client(topology)
    try:
        print(client.get(args.job_id).model_dump_json(indent=2))
    finally:
        client.close()
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    topology = _topology(args)
    from dispatcher import Client

    client = Client(topology)
    try:
        record = client.cancel(args.job_id)
    finally:
        client.close()
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
    from tools.demo import run_demo

    return run_demo(
        root=Path(args.root),
        image=Path(args.image),
        prompt=args.prompt,
        storage=args.storage,
        frames=args.frames,
        out=Path(args.out),
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
    from tools.sim.cli import add_commands as add_simulation_commands
    from tools.training.cli import add_distill_arguments, add_eval_arguments, add_train_arguments

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

    model = sub.add_parser("model", help="model files").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    init = model.add_parser("init", help="write a random-weight pipeline directory")
    init.add_argument("directory", help="where to write it")
    init.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    init.set_defaults(func=cmd_model_init)

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

    submit = sub.add_parser("submit", help="submit an image to the fleet; prints the job id")
    submit.add_argument("image", help="PNG, JPEG or WebP file")
    submit.add_argument("prompt", help="the motion to animate, e.g. 'pan left slowly'")
    submit.add_argument("--region", help="home region (default: the first in the topology)")
    submit.add_argument("--frames", type=int, default=8, help="frames of the animation")
    submit.add_argument("--fps", type=int, default=8, help="frames per second")
    submit.add_argument("--size", type=int, default=64, help="width and height, pixels")
    submit.add_argument("--wait", type=float, default=0, help="seconds to wait for the result")
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
    demo.add_argument("--image", default=str(EXAMPLE_IMAGE), help="image to animate")
    demo.add_argument("--prompt", default="pan left slowly", help="the motion to animate")
    demo.add_argument(
        "--storage", choices=["local", "s3"], default="s3", help="local directory or SeaweedFS S3"
    )
    demo.add_argument("--frames", type=int, default=8, help="frames of the animation")
    demo.add_argument("--out", default="out/demo", help="where the MP4 goes")
    demo.set_defaults(func=cmd_demo)

    add_simulation_commands(sub)  # simulate, plan
    return parser


def user_error(error: BaseException) -> tuple[str, int] | None:
    """The one-line message and exit code of a failure the user can act on; None for anything
    else, which keeps its traceback (a bug should not look like bad input)."""
    if isinstance(error, CliError):
        return str(error), error.code
    package = type(error).__module__.partition(".")[0]
    if package == "redis":
        from redis.exceptions import ConnectionError as RedisConnectionError

        if isinstance(error, RedisConnectionError):
            return f"cannot reach a region's Redis: {_one_line(error)}", 1
        return None
    if package not in ("animfleet", "dispatcher"):
        return None
    # Only now: these modules load celery and redis, too slow for every command's start.
    from animfleet.region.jobstore import JobNotFound
    from animfleet.settings import SettingsError
    from dispatcher.admission import AtCapacity
    from dispatcher.client import EnqueueFailed, WaitTimeout
    from dispatcher.inputs import InvalidInput

    if isinstance(error, SettingsError):  # names each bad variable and its value
        return " ".join(line.strip() for line in str(error).splitlines()), EX_CONFIG
    if isinstance(error, AtCapacity):
        retry_after = max(1, math.ceil(error.retry_after_s))  # what HTTP sends as Retry-After
        return (
            f"at capacity: no GPU free for jobs from region {error.source!r}; "
            f"retry after {retry_after} s",
            EX_TEMPFAIL,
        )
    if isinstance(error, InvalidInput):
        return f"invalid input: {error.field}: {error.message}", EX_USAGE
    if isinstance(error, JobNotFound):
        return f"job not found: {error.args[0] if error.args else '?'}", 1
    if isinstance(error, WaitTimeout | EnqueueFailed):
        return _one_line(error), 1
    return None


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
