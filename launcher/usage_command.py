"""``animfleet usage --tenant T [--from D] [--to D] [--csv]``: a tenant's use by day.

Read from the day roll-ups every region's sweeper keeps in its object storage (what
``GET /v1/usage`` answers), summed over the regions of the fleet file.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
from typing import Any

from launcher.command_errors import EX_USAGE, CliError
from launcher.fleet_args import topology_of

COLUMNS = (
    "day",
    "succeeded",
    "failed",
    "canceled",
    "expired",
    "gpu_seconds",
    "frame_pixels",
    "output_bytes",
    "deleted",
    "retention_deleted",
)


def add_usage_command(sub: Any) -> None:
    """The ``usage`` command (its parser only: nothing is imported until it runs)."""
    usage = sub.add_parser("usage", help="a tenant's jobs, GPU-seconds and bytes by day")
    usage.add_argument("--tenant", default="default", help="whose use (default: default)")
    usage.add_argument("--from", dest="first", help="YYYY-MM-DD (UTC; default: 30 days back)")
    usage.add_argument("--to", dest="last", help="YYYY-MM-DD (UTC; default: today)")
    usage.add_argument("--csv", action="store_true", help="CSV on stdout (default: JSON lines)")
    usage.set_defaults(func=cmd_usage)


def _day(value: str | None, default: datetime.date, flag: str) -> datetime.date:
    if value is None:
        return default
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise CliError(f"{flag}: not a date (got {value!r}); use YYYY-MM-DD", EX_USAGE) from None


def cmd_usage(args: argparse.Namespace) -> int:
    from animfleet.region.jobstore import JobStore
    from animfleet.region.usage import UsageBook, fleet_days
    from storage import open_store

    topology = topology_of(args)
    today = datetime.datetime.now(datetime.UTC).date()
    last = _day(args.last, today, "--to")
    first = _day(args.first, last - datetime.timedelta(29), "--from")
    books = []
    for name in topology.names:
        region = topology.region(name)
        store = JobStore.from_url(region.store)
        books.append(UsageBook(store, name, open_store(region.storage), region.storage.prefix))
    days = fleet_days(books, args.tenant, str(first), str(last))
    rows = [{"day": d.day, **d.jobs, **d.model_dump(exclude={"day", "jobs"})} for d in days]
    if args.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    else:
        for row in rows:
            print(json.dumps(row))
    return 0
