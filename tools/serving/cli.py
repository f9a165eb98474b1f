"""``animfleet model tune`` and ``animfleet model compile``: arguments and entry points.

Only the standard library at module level: the CLI builds its parser from this on every start.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SERVED_MODEL = "animfleet-small-distilled"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=SERVED_MODEL, help="a model directory, or a shipped model's name"
    )
    parser.add_argument(
        "--buckets", default="8x64x64", help="shape buckets FxHxW, comma-separated (the worker's)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU host")


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--floor-db", type=float, default=40.0, help="PSNR floor vs fp32 eager")
    parser.add_argument("--repeats", type=int, default=5, help="timed videos per configuration")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per configuration")
    parser.add_argument("--no-compile", action="store_true", help="measure eager choices only")
    parser.add_argument("--dry-run", action="store_true", help="print, do not write the profile")


def add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument(
        "--precision", choices=["fp32", "bf16"], help="default: the profile's for this device"
    )
    parser.add_argument(
        "--static-only",
        action="store_true",
        help="only the listed buckets, not the dynamic-shape package for every working size",
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also upload them to the regions' buckets (workers of this CPU kind fetch them)",
    )
    parser.add_argument("--region", action="append", help="a region to publish to (repeat)")


def _model_and_buckets(args: argparse.Namespace) -> tuple[Path, list[object]]:
    from animfleet.shipped_models import resolve_model
    from workers.model.runtime.loading import ShapeBucket

    buckets: list[object] = [ShapeBucket.parse(b) for b in args.buckets.split(",") if b.strip()]
    return resolve_model(args.model), buckets


def run_tune(args: argparse.Namespace) -> int:
    from tools.serving.tune import report, tune
    from workers.model.runtime.profile import save_profile

    model_dir, buckets = _model_and_buckets(args)
    entry = tune(
        model_dir,
        buckets,  # type: ignore[arg-type]
        floor_db=args.floor_db,
        repeats=args.repeats,
        threads=args.threads,
        compile=not args.no_compile,
        device=args.device,
    )
    print(report(entry))
    if not args.dry_run:
        print(f"wrote {save_profile(model_dir, entry)}: serving {entry.chosen.label()}")
    return 0


def run_compile(args: argparse.Namespace) -> int:
    from tools.serving.compile import compile_model
    from workers.model.runtime.profile import Choice, choose, device_key

    model_dir, buckets = _model_and_buckets(args)
    choice = None
    if args.precision:
        profiled, _ = choose(model_dir, device_key(args.device))
        choice = profiled.model_copy(update={"precision": args.precision, "compile": True})
    assert choice is None or isinstance(choice, Choice)
    done = compile_model(
        model_dir,
        buckets,  # type: ignore[arg-type]
        choice,
        device=args.device,
        dynamic=not args.static_only,
    )
    if args.publish:
        from launcher.fleet_args import regions_of
        from storage import open_store
        from workers.model.runtime.aot_share import SharedPackages

        for region in regions_of(args, args.region):
            shared = SharedPackages(open_store(region.storage))
            keys = shared.publish(model_dir, done.precision, args.device)
            print(f"published {len(keys)} files to region {region.name}'s bucket")
    return 0
