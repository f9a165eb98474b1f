"""Motion-brush regions on the command line: ``animfleet submit ... --region-mask water.png
--stroke "0.2,0.8;0.8,0.8" --kind flow --loop`` (each ``--region-mask`` starts a region, and
each ``--stroke``, ``--kind``, ``--speed`` and ``--amplitude`` belongs to the
``--region-mask`` before it), or ``--regions regions.json``: a list of ``{"mask":
"water.png", "kind": ..., "stroke": [[x, y], ...], "speed": ..., "amplitude": ...}``, mask
paths relative to the file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from launcher.command_errors import EX_USAGE, CliError

MASK_FLAG = "--region-mask"
REGION_FLAGS = ("--stroke", "--kind", "--speed", "--amplitude")  # each of the mask before it


KINDS = ("flow", "drift", "sway", "ripple", "pulse")


def _tagged(flag: str, convert: Callable[[str], Any]) -> Callable[[str], tuple[str, Any]]:
    """An argparse ``type`` that keeps the flag with its value: every region option appends to
    one list in command-line order, so each can go to the ``--region-mask`` before it
    (separate lists, paired by index, lose where each value stood)."""

    def parse(text: str) -> tuple[str, Any]:
        return flag, convert(text)

    parse.__name__ = convert.__name__  # argparse names it in "invalid float value"
    return parse


def _kind(text: str) -> str:
    if text not in KINDS:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(KINDS)})"
        )
    return text


def add_region_arguments(parser: argparse.ArgumentParser) -> None:
    def add(flag: str, convert: Callable[[str], Any], **options: Any) -> None:
        # No default: one would show as "[]" in the help, and args lacks region_flags without any.
        parser.add_argument(
            flag,
            action="append",
            dest="region_flags",
            type=_tagged(flag, convert),
            default=argparse.SUPPRESS,
            **options,
        )

    add(
        MASK_FLAG,
        str,
        metavar="PNG",
        help="starts a motion-brush region: PNG of the image's size or aspect ratio, white = "
        "region; each --stroke, --kind, --speed and --amplitude belongs to the one before it",
    )
    add(
        "--stroke",
        str,
        metavar="X,Y;X,Y...",
        help="the region's stroke, points as fractions (0-1) of width and height",
    )
    add(
        "--kind",
        _kind,
        metavar="{" + ",".join(KINDS) + "}",
        help="how the region moves (default flow)",
    )
    add("--speed", float, metavar="PX", help="the region's speed, px per frame")
    add("--amplitude", float, metavar="PX", help="the region's amplitude, pixels")
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


def _from_file(name: str) -> list[dict[str, Any]]:
    path = Path(name)
    try:
        listed = json.loads(_read(path, "regions file"))
    except json.JSONDecodeError as error:
        raise CliError(f"--regions {path}: not JSON: {error}", EX_USAGE) from None
    if not isinstance(listed, list) or not all(isinstance(r, dict) for r in listed):
        raise CliError(f"--regions {path}: must be a list of regions (objects)", EX_USAGE)
    regions = []
    for given in listed:
        mask = given.get("mask")
        if isinstance(mask, str):
            given = {**given, "mask": _read(path.parent / mask, "region mask")}
        regions.append(given)
    return regions


def _from_flags(flags: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Each ``--region-mask`` and the region options after it (up to the next one)."""
    regions: list[dict[str, Any]] = []
    masks: list[str] = []
    for flag, value in flags:
        if flag == MASK_FLAG:
            regions.append({"mask": _read(Path(value), "region mask")})
            masks.append(value)
            continue
        shown = f"{flag} {value}"
        if not regions:
            raise CliError(
                f"{shown} comes before any {MASK_FLAG}: each of {', '.join(REGION_FLAGS)} "
                f"belongs to the {MASK_FLAG} before it",
                EX_USAGE,
            )
        name = flag.removeprefix("--")
        if name in regions[-1]:
            raise CliError(f"{shown}: {flag} given twice for {MASK_FLAG} {masks[-1]}", EX_USAGE)
        regions[-1][name] = parse_stroke(value) if flag == "--stroke" else value
    return regions


def regions_from_args(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The regions the arguments describe, masks read (as the client's ``regions`` take):
    ``--regions``' file, then one per ``--region-mask`` with the options that follow it.
    Raises :class:`CliError` naming a region option given before any ``--region-mask`` or
    twice for one."""
    regions = _from_file(args.regions) if args.regions else []
    return regions + _from_flags(getattr(args, "region_flags", []))


def brush_options(args: argparse.Namespace) -> dict[str, Any]:
    """The submit's motion-brush options: its regions and loop, when given."""
    regions = regions_from_args(args)
    return {**({"regions": regions} if regions else {}), **({"loop": True} if args.loop else {})}
