"""``animfleet submit|get|cancel|list|download``: jobs, straight on the regions' Redis (the
fleet file's brokers), as an operator or a script on the fleet's network does.

Data goes to stdout and nothing else does (``JOB=$(animfleet submit ...)`` holds the id alone);
logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.brush_arguments import add_region_arguments, brush_options
from launcher.command_errors import EX_USAGE, CliError
from launcher.fleet_args import region_in, topology_of

if TYPE_CHECKING:
    from animfleet.topology import Topology
    from dispatcher import Client

JOB_STATES = ("queued", "running", "succeeded", "failed", "canceled", "expired")  # JobState


@contextlib.contextmanager
def _client(topology: Topology) -> Iterator[Client]:
    """A dispatcher client for one command (its logs on stderr), its routing refresh stopped
    afterwards."""
    from animfleet import logs
    from dispatcher import Client

    logs.configure()
    client = Client(topology)
    try:
        yield client
    finally:
        client.close()


def cmd_submit(args: argparse.Namespace) -> int:
    topology = topology_of(args)  # a bad fleet file or region fails before the slow imports
    if args.region is not None:
        region_in(topology, args.region)
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
            **({"tenant": args.tenant} if args.tenant else {}),
            **brush_options(args),
        )
        # Listed under its tenant by the admission itself, as every submitted job is.
        print(job.id, flush=True)
        if args.wait:
            print(client.wait(job.id, args.wait).model_dump_json(indent=2))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with _client(topology_of(args)) as client:
        print(client.get(args.job_id).model_dump_json(indent=2))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(topology_of(args)) as client:
        record = client.cancel(args.job_id)
    # A job that had finished already keeps its status: print what it is now, not "canceled".
    print(record.status.value)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """One line per job, newest first: id, status, created (UTC), prompt."""
    from animfleet.jobs import JobState
    from dispatcher.tenancy import Tenancy

    topology = topology_of(args)
    status = JobState(args.status) if args.status else None
    with _client(topology) as client:
        tenancy = Tenancy(client, topology.names[0])
        cursor, shown = None, 0
        while shown < args.limit:
            page = tenancy.list_jobs(
                args.tenant, status=status, cursor=cursor, limit=args.limit - shown
            )
            for record in page.jobs:
                created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created_at))
                print(f"{record.id}\t{record.status.value}\t{created}\t{record.params.prompt}")
            shown += len(page.jobs)
            cursor = page.next_cursor
            if cursor is None:
                break
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    """Write a finished job's MP4 to ``--out`` (default ``<job id>.mp4``); print its path."""
    from storage import open_store

    topology = topology_of(args)
    with _client(topology) as client:
        record = client.get(args.job_id)
    if record.output is None:
        raise CliError(f"job {record.id} has no output: it is {record.status.value}")
    store = open_store(region_in(topology, record.region).storage)
    out = Path(args.out) if args.out else Path(f"{record.id}.mp4")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(store.get(record.output.key))
    print(out)
    return 0


def add_job_commands(sub: Any) -> None:
    """``submit``, ``get``, ``cancel``, ``list``, ``download``."""
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
    submit.add_argument("--tenant", help="the tenant the job counts for (default: default)")
    submit.add_argument("--wait", type=float, default=0, help="seconds to wait for the result")
    add_region_arguments(submit)  # --region-mask, --stroke, --kind, ..., --regions, --loop
    submit.set_defaults(func=cmd_submit)

    get = sub.add_parser("get", help="print a job record")
    get.add_argument("job_id", help="the id that submit printed")
    get.set_defaults(func=cmd_get)

    cancel = sub.add_parser("cancel", help="cancel a job; prints its resulting status")
    cancel.add_argument("job_id", help="the id that submit printed")
    cancel.set_defaults(func=cmd_cancel)

    listing = sub.add_parser("list", help="a tenant's jobs, newest first: id, status, created")
    listing.add_argument("--tenant", default="default", help="whose jobs")
    listing.add_argument("--status", choices=JOB_STATES, help="only jobs in this state")
    listing.add_argument("--limit", type=int, default=20, help="at most this many jobs")
    listing.set_defaults(func=cmd_list)

    download = sub.add_parser("download", help="save a finished job's MP4; prints its path")
    download.add_argument("job_id", help="the id that submit printed")
    download.add_argument("--out", "-o", help="where to write it (default: <job id>.mp4)")
    download.set_defaults(func=cmd_download)
