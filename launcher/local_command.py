"""``animfleet local up``: an embedded fleet on this machine that behaves like production: API
keys required, one key and the webhook secret printed, fixed ports when asked, and a Ctrl-C that
stops everything within a few seconds. Its servers die with it (see
:mod:`launcher.fleet_watchdog`)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from launcher.command_errors import EX_USAGE, CliError

STOP_GRACE_S = 2.0  # per phase (clients, then servers): Ctrl-C is done within ~5 s


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the fleet as Ctrl-C does


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_local_up(args: argparse.Namespace) -> int:
    from animfleet.families import class_name_of
    from animfleet.shipped_models import resolve_model
    from launcher.local_fleet import LocalFleet
    from launcher.local_model import deploy_own_model
    from launcher.local_rabbitmq import rabbitmq_available
    from launcher.local_servers import port_free

    regions = tuple(args.region or ("local-a", "local-b"))
    api_ports = {region: args.port + index for index, region in enumerate(regions)}
    fixed = [("--port", port) for port in api_ports.values()]
    fixed += [("--redis-port", args.redis_port), ("--s3-port", args.s3_port)]
    for option, port in fixed:
        if port and not port_free(port):
            raise CliError(f"{option} {port}: 127.0.0.1:{port} is in use; give another", EX_USAGE)
    model_dir = resolve_model(args.model) if args.model else None
    if model_dir is not None:
        _check_model(model_dir)
    if args.broker == "rabbitmq" and not rabbitmq_available():
        raise CliError("--broker rabbitmq: rabbitmq-server is not installed here", EX_USAGE)
    fleet = LocalFleet(
        Path(args.root),
        regions=regions,
        storage=args.storage,
        store=args.store,
        workers_per_region=args.workers,
        model_dir=model_dir,
        gateway=not args.no_api,
        gateway_auth=True,
        webhooks=not args.no_api,
        # Receivers on this machine (127.0.0.1) are the point of a local fleet; production
        # refuses them, as every private address, unless told otherwise.
        service_env={"ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1"},
        gateway_ports=api_ports,
        redis_port=args.redis_port or 0,
        s3_port=args.s3_port or 0,
        broker=args.broker,
    )
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    _say(f"starting a local fleet in {fleet.root} ...")
    try:
        fleet.start()
        checkpoint = model_dir if model_dir and (model_dir / "model_index.json").is_file() else None
        if checkpoint and (ref := deploy_own_model(fleet.topology, checkpoint)):
            _say(f"serving {ref} ({class_name_of(checkpoint)}) as the default deployment")
        _print_fleet(fleet, args.tenant, time.monotonic() - started)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        _say("stopping the local fleet ...")
        stopping = time.monotonic()
        fleet.stop(STOP_GRACE_S)
        _say(f"local fleet stopped in {time.monotonic() - stopping:.1f} s")
    return 0


def _check_model(model_dir: Path) -> None:
    """Refuse a checkpoint whose pipeline class no family serves (anything else, such as a
    stand-in animator's argument, is the worker's to judge)."""
    from animfleet.families import UnknownFamily, spec_of_checkpoint

    if not (model_dir / "model_index.json").is_file():
        return
    try:
        spec_of_checkpoint(model_dir)
    except UnknownFamily as error:
        raise CliError(f"--model {model_dir}: {error}", EX_USAGE) from None


def _print_fleet(fleet: Any, tenant: str, took_s: float) -> None:
    """What a developer needs, on stdout: URLs, a key, the webhook secret, the fleet file."""
    lines = [f"local fleet up in {took_s:.0f} s (Ctrl-C stops it)"]
    if fleet.gateway:
        from dispatcher import Client
        from dispatcher.tenancy import create_key_everywhere

        client = Client(fleet.topology)
        try:
            key = create_key_everywhere(client, tenant, "animfleet local up").key
        finally:
            client.close()
        for region in fleet.regions:
            lines.append(f"  {region}: {fleet.gateway_url(region)}  (job API at /v1/jobs)")
        lines += [
            f"  API key (tenant {tenant}): {key}",
            f"  webhook secret: {fleet.webhook_secrets[0]}",
            "  webhooks to loopback addresses (http://127.0.0.1:...) are allowed in this local"
            " fleet; production refuses them",
        ]
    lines += [
        f"  redis: 127.0.0.1:{fleet.redis_port}"
        + (f"  S3: {fleet.s3_endpoint}" if fleet.storage == "s3" else ""),
        # A shell line as printed: the note after it is a comment.
        f"  export ANIMFLEET_FLEET_FILE={fleet.fleet_file}"
        "   # for animfleet submit, list, keys, ...",
    ]
    print("\n".join(lines), flush=True)


def add_local_commands(sub: Any) -> None:
    """``local up``."""
    local = sub.add_parser("local", help="embedded local fleet").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    up = local.add_parser(
        "up", help="start Redis, storage, workers and the API until Ctrl-C; prints an API key"
    )
    up.add_argument("--root", default="run/local", help="state directory (emptied first)")
    up.add_argument(
        "--storage", choices=["local", "s3"], default="s3", help="local directory or SeaweedFS S3"
    )
    up.add_argument(
        "--store",
        choices=["redis", "cluster"],
        default="redis",
        help="each region's store: the broker's Redis, or a Redis Cluster of its own "
        "(3 masters, 3 replicas; the broker stays a plain Redis)",
    )
    up.add_argument("--workers", type=int, default=1, help="workers per region")
    up.add_argument(
        "--region", action="append", help="a region (repeat; default: local-a and local-b)"
    )
    up.add_argument("--model", help="the workers' model directory (default: the shipped model)")
    up.add_argument(
        "--port", type=int, default=8000, help="the first region's API port; the next follow it"
    )
    up.add_argument("--redis-port", type=int, help="Redis's port (default: a free one)")
    up.add_argument(
        "--s3-port", type=int, help="the S3 server's port, and port + 10000 (default: free ones)"
    )
    up.add_argument(
        "--broker",
        choices=["redis", "rabbitmq"],
        default="redis",
        help="the GPU queues: on the Redis, or on a private RabbitMQ node (quorum queues)",
    )
    up.add_argument("--tenant", default="default", help="the tenant of the printed API key")
    up.add_argument(
        "--no-api", action="store_true", help="no HTTP gateway and webhook sender per region"
    )
    up.set_defaults(func=cmd_local_up)
