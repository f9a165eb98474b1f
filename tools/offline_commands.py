"""The offline tools' commands of ``animfleet``: model files and training, the simulator and
the demo. The launcher registers them by this module's name, only when one is asked for, so
nothing the fleet runs imports ``tools``.

Parsers only at module level; each command imports what it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_demo(args: argparse.Namespace) -> int:
    from tools.demo import demo_photo, run_demo

    return run_demo(
        root=Path(args.root),
        image=Path(args.image) if args.image else demo_photo(),
        prompt=args.prompt,
        storage=args.storage,
        frames=args.frames,
        out=Path(args.out),
        size=args.size,
        brush=args.brush,
    )


def add_demo_command(sub: Any) -> None:
    demo = sub.add_parser("demo", help="start a local fleet, animate the example image, stop")
    demo.add_argument("--root", default="run/demo", help="state directory")
    demo.add_argument("--image", help="image to animate (default: matplotlib's sample photograph)")
    demo.add_argument("--size", type=int, default=512, help="width and height of the video")
    demo.add_argument("--prompt", default="pan left slowly", help="the motion to animate")
    demo.add_argument(
        "--storage", choices=["local", "s3"], default="s3", help="local directory or SeaweedFS S3"
    )
    demo.add_argument("--frames", type=int, default=8, help="frames of the animation")
    demo.add_argument("--out", default="out/demo", help="where the MP4 goes")
    demo.add_argument("--brush", action="store_true", help="instead: the motion-brush loop")
    demo.set_defaults(func=cmd_demo)


def add_offline_commands(sub: Any) -> None:
    """Add the offline commands to ``sub`` (the ``animfleet`` command's subparsers)."""
    from tools.model_cli import add_model_commands
    from tools.sim.cli import add_commands as add_simulation_commands

    add_model_commands(sub)  # model init|tune|compile|push|list|show, train, distill, eval, ...
    add_simulation_commands(sub)  # simulate, plan
    add_demo_command(sub)
