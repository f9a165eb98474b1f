"""``animfleet train-fill``: its arguments and command (no torch at import, for --help)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

FILL_DIR = Path("models") / "animfleet-edge-fill"  # relative to the repository root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", default="run/fill", help="resumable state")
    parser.add_argument("--out", default=str(FILL_DIR), help="export to")
    parser.add_argument("--steps", type=int, default=1500, help="optimiser steps in all")
    parser.add_argument("--seed", type=int, default=0, help="only when starting a run")
    parser.add_argument("--minutes", type=float, default=None, help="stop (resumably) after")
    parser.add_argument(
        "--export-now", action="store_true", help="export the EMA weights as they are (no steps)"
    )


def train_fill(args: argparse.Namespace) -> int:
    """Train (or resume) and export the EMA weights when the run is complete."""
    import torch

    from tools.training.fill.train import FillConfig, FillRun

    torch.set_num_threads(int(os.environ.get("ANIMFLEET_TORCH_THREADS", "1")))
    run = FillRun(Path(args.run_dir), FillConfig(steps=args.steps, seed=args.seed))
    if not args.export_now:
        run.train(args.minutes)
    if run.state.step < run.config.steps and not args.export_now:
        print(f"stopped at step {run.state.step}/{run.config.steps}; run again to resume")
        return 0
    print(f"exported {run.export(Path(args.out))}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return train_fill(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
