"""Arguments and entry points of ``animfleet train`` and ``animfleet eval``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from animfleet.models import SHIPPED_MODEL_DIR

DEFAULT_RUN = "run/train/small"


def _threads() -> None:
    import torch

    threads = int(os.environ.get("ANIMFLEET_TORCH_THREADS", "0")) or (os.cpu_count() or 1)
    torch.set_num_threads(threads)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", default=DEFAULT_RUN, help="run directory (resumes if present)")
    parser.add_argument("--steps", type=int, default=8000, help="total steps of the run")
    parser.add_argument("--minutes", type=float, help="stop this stretch after this long")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument("--seed", type=int, default=0, help="only when starting a run")
    parser.add_argument("--batch-size", type=int, default=8, help="only when starting a run")
    parser.add_argument("--export", help="after training, write the EMA weights here")
    parser.add_argument(
        "--decay-from", type=int, help="cosine learning-rate decay from this step (also later)"
    )
    parser.add_argument("--decay-steps", type=int, default=2000)
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="only export the last checkpoint (safe while another process trains the run)",
    )


def train(args: argparse.Namespace) -> int:
    from workers.training.train import TrainConfig, Trainer, steps_per_second

    _threads()
    run = Path(args.run)
    fresh = not (run / "config.json").exists()
    config = TrainConfig(seed=args.seed, batch_size=args.batch_size) if fresh else None
    trainer = Trainer(run, config)
    planned = (trainer.config.decay_from, trainer.config.decay_steps)
    if args.decay_from is not None and (args.decay_from, args.decay_steps) != planned:
        trainer.schedule_decay(args.decay_from, args.decay_steps)
    if args.export_only:
        if not args.export or fresh:
            raise SystemExit("--export-only needs --export DIR and an existing --run")
        print(f"exported step {trainer.state.step} to {trainer.export(Path(args.export))}")
        return 0
    print(f"{'starting' if fresh else 'resuming'} {run} at step {trainer.state.step}")
    trainer.run(args.steps, minutes=args.minutes, checkpoint_every=args.checkpoint_every)
    print(
        f"step {trainer.state.step}: {trainer.state.seconds / 60:.1f} min of training, "
        f"{steps_per_second(trainer):.2f} steps/s; loss curve {run / 'loss.png'}"
    )
    if args.export:
        print(f"exported to {trainer.export(Path(args.export))}")
    return 0


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=str(SHIPPED_MODEL_DIR), help="a from_pretrained directory"
    )
    parser.add_argument("--out", default="out/eval", help="report, contact sheet and MP4s")
    parser.add_argument("--per-family", type=int, default=64, help="held-out clips per family")
    parser.add_argument("--steps", default="15,32", help="DPM-Solver++ step counts to evaluate")
    parser.add_argument("--size", type=int, default=32)
    # The shipped model's best scales: its passes predict clean clips, which guidance combines
    # linearly, so scales above 1 extrapolate pixels (ghosting) rather than motion.
    parser.add_argument("--image-guidance", type=float, default=1.0)
    parser.add_argument("--text-guidance", type=float, default=1.0)
    parser.add_argument(
        "--families", default="pan,zoom,rotate,bounce,sway", help="comma-separated"
    )
    parser.add_argument(
        "--card", action="store_true", help="rewrite the model's README.md from this report"
    )


def evaluate(args: argparse.Namespace) -> int:
    from workers.training.evaluate import EvalSettings, run_eval

    _threads()
    settings = EvalSettings(
        per_family=args.per_family,
        steps=tuple(int(s) for s in args.steps.split(",")),
        size=args.size,
        image_guidance_scale=args.image_guidance,
        text_guidance_scale=args.text_guidance,
        families=tuple(args.families.split(",")),
    )
    report = run_eval(Path(args.model), Path(args.out), settings)
    print(report.summary())
    if args.card:
        from workers.training.card import write_card

        report_json = json.loads((Path(args.out) / "report.json").read_text())
        print(f"model card: {write_card(Path(args.model), report_json)}")
    return 0
