"""``animfleet deploy set|apply|promote|status``: which model versions a region serves.

A deployment maps versions to weights per region (``animfleet.region.deployments``). ``set``
and ``apply`` write them (every version must be in the region's catalog: ``animfleet model
push`` first); a canary worse than stable is rolled back by the workers themselves, and
``status`` shows each version's recent error rate and p95 next to the events that moved
traffic, rollbacks with their reason and the jobs the canary failed. Promotion is explicit.
"""

# Parsers only at module level: ``animfleet --help`` builds them; each command imports its work.

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.command_errors import EX_USAGE, CliError, problem
from launcher.fleet_args import regions_of

if TYPE_CHECKING:
    import redis

    from animfleet.region.deployments import Deployment
    from animfleet.topology import Region

POLICY_FIELDS = ("window_s", "min_samples", "max_error_rate_increase", "max_p95_ratio")


def add_deploy_commands(sub: Any) -> None:
    """The ``deploy`` command group (parsers only)."""
    group = sub.add_parser("deploy", help="model deployments: weights, canaries, rollbacks")
    deploy = group.add_subparsers(dest="deploy_command", required=True, metavar="ACTION")
    put = deploy.add_parser("set", help="create or replace a deployment's weighted versions")
    put.add_argument("name", help="the deployment (`default` serves jobs that name none)")
    put.add_argument("weights", nargs="+", metavar="NAME@VERSION=WEIGHT")
    put.add_argument("--stable", required=True, help="the version rollbacks fall back to")
    put.add_argument("--window-s", type=float, help="rollback: sliding window (default 600)")
    put.add_argument("--min-samples", type=int, help="rollback: canary jobs before judging (20)")
    put.add_argument(
        "--max-error-rate-increase", type=float, help="rollback: canary minus stable (0.05)"
    )
    put.add_argument("--max-p95-ratio", type=float, help="rollback: canary / stable p95 (1.5)")
    put.add_argument("--region", action="append", help="a region (repeat; default: all)")
    put.set_defaults(func=cmd_deploy_set)
    apply = deploy.add_parser("apply", help="set the deployments of a JSON file (Terraform)")
    apply.add_argument("file", type=Path, help='{"name": {"versions": {...}, "stable": ...}}')
    apply.add_argument("--region", action="append", help="a region (repeat; default: all)")
    apply.set_defaults(func=cmd_deploy_apply)
    promote = deploy.add_parser("promote", help="make a version stable with all the traffic")
    promote.add_argument("name")
    promote.add_argument("version", help="name@version, one of the deployment's")
    promote.add_argument("--region", action="append", help="a region (repeat; default: all)")
    promote.set_defaults(func=cmd_deploy_promote)
    status = deploy.add_parser("status", help="weights, per-version health, recent events")
    status.add_argument("name", nargs="?", help="one deployment (default: all)")
    status.add_argument("--region", action="append", help="a region (repeat; default: all)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_deploy_status)


def _redis(region: Region) -> redis.Redis:
    from animfleet.region.store_client import store_client

    return store_client(region.store)


def _parse_weights(items: list[str]) -> dict[str, float]:
    weights = {}
    for item in items:
        ref, sep, weight = item.rpartition("=")
        try:
            if not sep:
                raise ValueError
            weights[ref] = float(weight)
        except ValueError:
            raise CliError(f"weights are NAME@VERSION=WEIGHT, got {item!r}", EX_USAGE) from None
    return weights


def _store(region: Region, deployment: Deployment, reason: str) -> None:
    """Write ``deployment`` to ``region`` once every version is in its catalog."""
    from animfleet.region.catalog import ModelCatalog
    from animfleet.region.deployments import Deployments

    client = _redis(region)
    missing = sorted(set(deployment.versions) - ModelCatalog(client, region.name).refs())
    if missing:
        raise CliError(
            f"region {region.name} has no version {', '.join(missing)}: "
            "push it first (animfleet model push DIR NAME@VERSION)",
            EX_USAGE,
        )
    Deployments(client, region.name).put(deployment, reason)
    print(f"{region.name}: {deployment.name} = {_weights(deployment)}")


def _deployment(name: str, spec: dict[str, Any]) -> Deployment:
    from pydantic import ValidationError

    from animfleet.region.deployments import Deployment

    try:
        return Deployment.model_validate({"name": name, **spec})
    except ValidationError as error:
        raise CliError(f"deployment {name}: {problem(error)}", EX_USAGE) from None


def cmd_deploy_set(args: argparse.Namespace) -> int:
    policy = {f: getattr(args, f) for f in POLICY_FIELDS if getattr(args, f) is not None}
    spec = {"versions": _parse_weights(args.weights), "stable": args.stable, "rollback": policy}
    deployment = _deployment(args.name, spec)
    for region in regions_of(args, args.region):
        _store(region, deployment, "set by an operator (animfleet deploy set)")
    return 0


def cmd_deploy_apply(args: argparse.Namespace) -> int:
    try:
        specs = json.loads(args.file.read_text())
    except (OSError, ValueError) as error:
        raise CliError(f"cannot read {args.file}: {error}", EX_USAGE) from None
    if not isinstance(specs, dict):
        raise CliError(f"{args.file}: expected an object of deployments by name", EX_USAGE)
    deployments = [_deployment(name, spec) for name, spec in specs.items()]
    for region in regions_of(args, args.region):
        for deployment in deployments:
            _store(region, deployment, f"applied from {args.file.name}")
    return 0


def cmd_deploy_promote(args: argparse.Namespace) -> int:
    from animfleet.region.deployments import Deployments

    for region in regions_of(args, args.region):
        try:
            deployment = Deployments(_redis(region), region.name).promote(args.name, args.version)
        except KeyError:
            raise CliError(f"region {region.name} has no deployment {args.name!r}", 1) from None
        except ValueError as error:
            raise CliError(str(error), EX_USAGE) from None
        print(f"{region.name}: {deployment.name} = {_weights(deployment)}")
    return 0


def _weights(deployment: Deployment) -> str:
    total = sum(deployment.versions.values()) or 1.0
    return ", ".join(
        f"{ref} {weight / total:.0%}{' (stable)' if ref == deployment.stable else ''}"
        for ref, weight in sorted(deployment.versions.items())
    )


def status_report(client: redis.Redis, region: str, name: str | None) -> dict[str, Any]:
    """Per deployment: weights, each version's health in its rollback window, its events."""
    from animfleet.region.canary import VersionRuns
    from animfleet.region.deployments import Deployments

    deployments = Deployments(client, region)
    runs = VersionRuns(client, region)
    chosen = deployments.all()
    if name is not None:
        if name not in chosen:
            raise CliError(f"region {region} has no deployment {name!r}", 1)
        chosen = {name: chosen[name]}
    report = {}
    for key, deployment in chosen.items():
        window = deployment.rollback.window_s
        report[key] = {
            "stable": deployment.stable,
            "weights": deployment.versions,
            "rollback_policy": deployment.rollback.model_dump(),
            "health": {v: runs.stats(v, window).summary() for v in sorted(deployment.versions)},
            "events": [e.model_dump() for e in deployments.events(10, key)],
        }
    return report


def cmd_deploy_status(args: argparse.Namespace) -> int:
    reports = {
        region.name: status_report(_redis(region), region.name, args.name)
        for region in regions_of(args, args.region)
    }
    if args.json:
        json.dump(reports, sys.stdout, indent=2)
        print()
        return 0
    for region, report in reports.items():
        for name, entry in report.items():
            print(f"{region} / {name}  (stable {entry['stable']})")
            for ref, weight in sorted(entry["weights"].items()):
                health = entry["health"][ref]
                p95 = "-" if health["p95_s"] is None else f"{health['p95_s']:.3f}s"
                print(
                    f"  {ref:<44} weight {weight:>6g}  jobs {health['samples']:>5}  "
                    f"errors {health['error_rate']:>6.1%}  p95 {p95}"
                )
            for event in entry["events"]:
                when = datetime.fromtimestamp(event["at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
                what = f"{event['kind']} {event['version'] or ''}".strip()
                print(f"  {when} UTC  {what}: {event['reason']}")
                if event["failed_jobs"]:
                    print(f"    failed jobs: {', '.join(event['failed_jobs'])}")
    return 0
