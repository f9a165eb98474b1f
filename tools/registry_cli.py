"""``animfleet model push|list|show``: model versions in each region's registry and catalog.

``push`` uploads a model directory as ``name@version`` to the bucket of every chosen region
(``storage.registry``), then adds it to that region's catalog in Redis, which dispatchers and
workers read. ``list`` prints the catalogs; ``show`` prints a version's manifest.
"""

# Parsers only at module level: ``animfleet --help`` builds them; each command imports its work.

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from launcher.command_errors import EX_USAGE, CliError, one_line
from launcher.fleet_args import regions_of

if TYPE_CHECKING:
    from pathlib import Path

    from animfleet.topology import Region
    from storage.registry import ModelRegistry


def add_registry_commands(model: Any) -> None:
    """``push``, ``list`` and ``show`` under the ``model`` command group (parsers only)."""
    push = model.add_parser("push", help="publish a model directory as name@version per region")
    push.add_argument("source", help="a model directory, or a shipped model's name")
    push.add_argument("ref", help="the version to publish it as: name@version")
    _add_regions(push, "a region to push to (repeat; default: all)")
    push.set_defaults(func=cmd_model_push)
    listing = model.add_parser("list", help="the model versions in each region's catalog")
    _add_regions(listing, "a region whose catalog to list (repeat; default: all)")
    listing.set_defaults(func=cmd_model_list)
    show = model.add_parser("show", help="print a model version's manifest (files, hashes)")
    show.add_argument("ref", help="the version: name@version")
    show.add_argument("--region", help="the region's registry (default: the first)")
    show.set_defaults(func=cmd_model_show)


def _add_regions(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--region", action="append", help=help)


def _registry(region: Region) -> ModelRegistry:
    from storage import open_store
    from storage.registry import ModelRegistry

    return ModelRegistry(open_store(region.storage), region.storage.prefix)


def _check_ref(ref: str) -> None:
    from animfleet.versions import BadVersionRef, split_ref

    try:
        split_ref(ref)
    except BadVersionRef as error:
        raise CliError(str(error), EX_USAGE) from None


def _source(value: str) -> Path:
    from animfleet.families import UnknownFamily, spec_of_checkpoint
    from animfleet.shipped_models import resolve_model

    path = resolve_model(value)
    if not path.is_dir():
        raise CliError(f"no model directory or shipped model named {value!r}", EX_USAGE)
    if not (path / "model_index.json").is_file():
        raise CliError(f"{path} is not a model directory (it has no model_index.json)", EX_USAGE)
    try:
        spec_of_checkpoint(path)
    except UnknownFamily as error:
        raise CliError(f"{path}: {error}", EX_USAGE) from None
    return path


def cmd_model_push(args: argparse.Namespace) -> int:
    """Push to every chosen region; refuses before uploading anything if any region already
    holds ``ref`` with other content (versions are immutable)."""
    from animfleet.region.catalog import ModelCatalog
    from animfleet.region.store_client import store_client
    from storage import StorageError
    from storage.catalog_entry import catalog_entry
    from storage.registry import ModelNotFound, content_hash, directory_files

    _check_ref(args.ref)
    source = _source(args.source)
    regions = regions_of(args, args.region)
    digest = content_hash(directory_files(source))
    try:
        for region in regions:
            try:
                existing = _registry(region).manifest(args.ref).hash
            except ModelNotFound:
                continue
            if existing != digest:
                raise CliError(
                    f"{args.ref} already exists in region {region.name} with hash "
                    f"{existing[:12]}; {source} hashes to {digest[:12]}: versions are "
                    "immutable, push it as a new version",
                    EX_USAGE,
                )
        for region in regions:
            manifest = _registry(region).push(source, args.ref)
            entry = catalog_entry(manifest, source)
            client = store_client(region.store)
            try:
                ModelCatalog(client, region.name).add(entry)
            finally:
                client.close()
            print(
                f"{region.name}\t{manifest.ref}\t{manifest.hash[:12]}\t"
                f"{len(manifest.files)} files\t{_size(manifest.bytes)}"
            )
    except (StorageError, ValueError) as error:  # ValueError: changed under us, or empty
        raise CliError(f"push {args.ref}: {one_line(error)}") from None
    return 0


def cmd_model_list(args: argparse.Namespace) -> int:
    """One line per version in each chosen region's catalog."""
    from animfleet.region.catalog import ModelCatalog
    from animfleet.region.store_client import store_client

    rows = [("REGION", "REF", "HASH", "SIZE", "PUSHED (UTC)")]
    for region in regions_of(args, args.region):
        client = store_client(region.store)
        try:
            entries = ModelCatalog(client, region.name).entries()
        finally:
            client.close()
        rows.extend(
            (region.name, e.ref, e.hash[:12], _size(e.bytes), _when(e.pushed_at)) for e in entries
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def cmd_model_show(args: argparse.Namespace) -> int:
    """The manifest of ``ref`` in one region's registry, as JSON."""
    from storage import StorageError
    from storage.registry import ModelNotFound

    _check_ref(args.ref)
    region = regions_of(args, [args.region] if args.region else None)[0]
    try:
        manifest = _registry(region).manifest(args.ref)
    except ModelNotFound:
        raise CliError(f"no model version {args.ref} in region {region.name}", EX_USAGE) from None
    except StorageError as error:
        raise CliError(f"show {args.ref}: {one_line(error)}") from None
    print(manifest.model_dump_json(indent=2))
    return 0


def _size(count: int) -> str:
    value, unit = float(count), 0
    while value >= 1000 and unit < 3:
        value, unit = value / 1000, unit + 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {('KB', 'MB', 'GB')[unit - 1]}"


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S")
