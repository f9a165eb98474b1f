"""Motion-brush regions on the command line: ``animfleet submit ... --region-mask water.png
--stroke "0.2,0.8;0.8,0.8" --kind flow --loop`` (each ``--region-mask`` starts a region; the
n-th ``--stroke``, ``--kind``, ``--speed`` and ``--amplitude`` belong to the n-th region), or
``--regions regions.json``: a list of ``{"mask": "water.png", "kind": ..., "stroke": [[x, y],
...], "speed": ..., "amplitude": ...}``, mask paths relative to the file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from launcher.command_errors import EX_USAGE, CliError


def add_region_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--region-mask",
        action="append",
        default=[],
        metavar="PNG",
        help="a motion-brush region: PNG of the image's size or aspect ratio, white = region",
    )
    parser.add_argument(
        "--stroke",
        action="append",
        default=[],
        metavar="X,Y;X,Y...",
        help="the region's stroke, points as fractions (0-1) of width and height",
    )
    parser.add_argument(
        "--kind",
        action="append",
        default=[],
        choices=["flow", "drift", "sway", "ripple", "pulse"],
        help="how the region moves (default flow)",
    )
    parser.add_argument("--speed", action="append", default=[], type=float, help="px per frame")
    parser.add_argument("--amplitude", action="append", default=[], type=float, help="pixels")
    parser.add_argument("--regions", metavar="JSON", help="regions as a JSON file (see above)")
    parser.add_argument("--loop", action="store_true", help="a seamless loop")


def parse_stroke(text: str) -> list[list[float]]:
    """``"x,y;x,y"`` as ``[[x, y], [x, y]]``; raises :class:`CliError`."""
    try:
        points = [[float(v) for v in point.split(",")] for point in text.split(";") if point]
    except ValueError:
        raise CliError(
            f"--stroke {text!r}: points must be numbers like 0.2,0.8", EX_USAGE
        ) from None
    if any(len(point) != 2 for point in points):
        raise CliError(f"--stroke {text!r}: each point is x,y; points are separated by ;", EX_USAGE)
    return points


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise CliError(f"cannot read {what} {path}: {error.strerror}", EX_USAGE) from None


def regions_from_args(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The regions the arguments describe, masks read (as the client's ``regions`` take)."""
    regions: list[dict[str, Any]] = []
    if args.regions:
        path = Path(args.regions)
        try:
            listed = json.loads(_read(path, "regions file"))
        except json.JSONDecodeError as error:
            raise CliError(f"--regions {path}: not JSON: {error}", EX_USAGE) from None
        if not isinstance(listed, list) or not all(isinstance(r, dict) for r in listed):
            raise CliError(f"--regions {path}: must be a list of regions (objects)", EX_USAGE)
        for given in listed:
            mask = given.get("mask")
            if isinstance(mask, str):
                given = {**given, "mask": _read(path.parent / mask, "region mask")}
            regions.append(given)
    for index, mask_path in enumerate(args.region_mask):
        region: dict[str, Any] = {"mask": _read(Path(mask_path), "region mask")}
        for name, values in (("kind", args.kind), ("speed", args.speed)):
            if index < len(values):
                region[name] = values[index]
        if index < len(args.amplitude):
            region["amplitude"] = args.amplitude[index]
        if index < len(args.stroke):
            region["stroke"] = parse_stroke(args.stroke[index])
        regions.append(region)
    extra = len(args.stroke) - len(args.region_mask)
    if extra > 0 and not args.regions:
        raise CliError(f"{extra} --stroke without a --region-mask before it", EX_USAGE)
    return regions


def brush_options(args: argparse.Namespace) -> dict[str, Any]:
    """The submit's motion-brush options: its regions and loop, when given."""
    regions = regions_from_args(args)
    return {**({"regions": regions} if regions else {}), **({"loop": True} if args.loop else {})}
