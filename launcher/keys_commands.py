"""``animfleet keys create|list|revoke|rotate|webhook-secret|limits --tenant T``: API keys
and limits of the tenants of the HTTP gateway.

A new key is printed once, on stdout, and never stored: only its hash is, in every region of
the fleet file, so every gateway accepts it. Listing shows key ids, never secrets. Without a
fleet file (``--fleet`` or ``ANIMFLEET_FLEET_FILE``) every keys command refuses to run.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from launcher.command_errors import EX_USAGE, CliError
from launcher.fleet_args import topology_of


def add_keys_commands(sub: Any) -> None:
    """The ``keys`` command group (parsers only: nothing is imported until one runs)."""
    keys = sub.add_parser("keys", help="API keys of the HTTP gateway, per tenant")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="make a key; printed once, stored as a hash")
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument("--name", default="", help="a label to recognise the key by")
    create.set_defaults(func=cmd_keys_create)
    listing = actions.add_parser("list", help="a tenant's key ids, with creation and revocation")
    listing.add_argument("--tenant", required=True)
    listing.set_defaults(func=cmd_keys_list)
    revoke = actions.add_parser("revoke", help="revoke a key at once (by id or the whole key)")
    revoke.add_argument("key", help="the key id (the 16 hex digits after af_) or the key")
    revoke.add_argument("--tenant", required=True)
    revoke.set_defaults(func=cmd_keys_revoke)
    rotate = actions.add_parser("rotate", help="a new key; the old one works for --grace s")
    rotate.add_argument("key", help="the key id or the key")
    rotate.add_argument("--tenant", required=True)
    rotate.add_argument("--grace", type=float, default=3600.0, help="seconds the old key works")
    rotate.set_defaults(func=cmd_keys_rotate)
    webhook = actions.add_parser(
        "webhook-secret", help="a new webhook signing secret; the previous one signs too"
    )
    webhook.add_argument("--tenant", required=True)
    webhook.add_argument(
        "--drop-old", action="store_true", help="instead: stop signing with the previous one"
    )
    webhook.set_defaults(func=cmd_webhook_secret)
    limits = actions.add_parser("limits", help="set a tenant's limits and fair-share weight")
    limits.add_argument("--tenant", required=True)
    limits.add_argument("--rate", type=float, help="requests per second (token bucket refill)")
    limits.add_argument("--burst", type=int, help="requests at once (the bucket's size)")
    limits.add_argument("--in-flight", type=int, help="jobs queued or running at once")
    limits.add_argument("--backlog-cap", type=int, help="jobs waiting in a region's backlog")
    limits.add_argument("--weight", type=float, default=1.0, help="fair share in the backlog")
    limits.add_argument(
        "--retention-days", type=float, help="erase the tenant's jobs this long after they end"
    )
    limits.set_defaults(func=cmd_keys_limits)


def _key_id(text: str) -> str:
    parts = text.split("_", 2)
    return parts[1] if len(parts) == 3 and parts[0] == "af" else text


def _client(args: argparse.Namespace) -> Any:
    """A client of the regions the fleet file names. Never the built-in topology: its Redis is
    whatever answers on 127.0.0.1:6379, maybe not this fleet's, and a key written there fails
    against the fleet without a word."""
    if not (args.fleet or os.environ.get("ANIMFLEET_FLEET_FILE")):
        raise CliError(
            "keys: which fleet? give --fleet FILE or set ANIMFLEET_FLEET_FILE (animfleet local"
            " up prints it); keys are never written to a Redis the fleet file does not name",
            EX_USAGE,
        )
    from dispatcher import Client

    return Client(topology_of(args))


def _no_key(args: argparse.Namespace) -> SystemExit:
    return SystemExit(f"animfleet: error: tenant {args.tenant} has no key {_key_id(args.key)}")


def cmd_keys_create(args: argparse.Namespace) -> int:
    from dispatcher.tenancy import create_key_everywhere

    client = _client(args)
    try:
        issued = create_key_everywhere(client, args.tenant, args.name)
    finally:
        client.close()
    print(issued.key)  # the only time it is shown
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from animfleet.region.tenants import Tenants

    client = _client(args)
    try:
        keys = Tenants(client.store(client.topology.names[0]).redis).keys(args.tenant)
    finally:
        client.close()
    for key in keys:
        state = "revoked" if key.revoked else "active"
        if key.revoked_at is not None and not key.revoked:
            state = f"active until {_when(key.revoked_at)}"
        print(f"af_{key.id}_…\t{_when(key.created_at)}\t{state}\t{key.name}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from animfleet.region.tenants import UnknownKey
    from dispatcher.tenancy import revoke_everywhere

    client = _client(args)
    try:
        revoke_everywhere(client, _key_id(args.key), args.tenant)
    except UnknownKey:
        raise _no_key(args) from None
    finally:
        client.close()
    print("revoked")
    return 0


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    from animfleet.region.tenants import UnknownKey
    from dispatcher.tenancy import create_key_everywhere, revoke_everywhere

    client = _client(args)
    try:
        issued = create_key_everywhere(client, args.tenant)
        revoke_everywhere(client, _key_id(args.key), args.tenant, at=time.time() + args.grace)
    except UnknownKey:
        raise _no_key(args) from None
    finally:
        client.close()
    print(issued.key)
    return 0


def cmd_webhook_secret(args: argparse.Namespace) -> int:
    from animfleet.region.tenants import Tenants

    client = _client(args)
    try:
        regions = [Tenants(client.store(name).redis) for name in client.topology.names]
        if args.drop_old:
            for tenants in regions:
                tenants.drop_old_webhook_secret(args.tenant)
            print("the previous secret no longer signs")
            return 0
        secret = regions[0].rotate_webhook_secret(args.tenant)
        for tenants in regions[1:]:  # the same secret in every region
            tenants.rotate_webhook_secret(args.tenant, secret)
    finally:
        client.close()
    print(secret)  # give it to the receiver; it is not shown again
    return 0


def cmd_keys_limits(args: argparse.Namespace) -> int:
    from animfleet.region.tenants import Limits, Tenants

    try:
        limits = Limits(
            rate_per_s=args.rate,
            burst=args.burst,
            in_flight=args.in_flight,
            backlog_cap=args.backlog_cap,
            weight=args.weight,
            retention_s=args.retention_days * 86400 if args.retention_days is not None else None,
        )
    except ValueError as error:
        raise SystemExit(f"animfleet: error: {error}") from None
    client = _client(args)
    try:
        for name in client.topology.names:  # every region's gateways and scheduler read them
            Tenants(client.store(name).redis).set_limits(args.tenant, limits)
    finally:
        client.close()
    print(f"tenant {args.tenant}: {limits}")
    return 0


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
