"""Arguments and entry points of ``animfleet train``, ``distill`` and ``eval``.

Module level stays light (no torch, no matplotlib): ``animfleet --help`` builds these parsers; the
training code is imported inside the entry points.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from animfleet.shipped_models import SHIPPED_MODEL_DIR, SHIPPED_STUDENT_DIR

DEFAULT_RUN = "run/train/small"
DEFAULT_DISTILL_RUN = "run/distill/small"


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
    parser.add_argument(
        "--decay-steps", type=int, default=2000, help="length of the decay, with --decay-from"
    )
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="only export the last checkpoint (safe while another process trains the run)",
    )


def train(args: argparse.Namespace) -> int:
    from tools.training.base.train import TrainConfig, Trainer, steps_per_second

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


def _pair(text: str) -> tuple[float, float]:
    low, high = _two_floats(text)
    if not 0 <= low <= high:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH with 0 <= LOW <= HIGH, got {text!r}")
    return low, high


def add_distill_arguments(parser: argparse.ArgumentParser) -> None:
    # Unset options take DistillConfig's defaults (see `tools/training/student/distill.py`);
    # importing it here would load torch for every animfleet command.
    parser.add_argument("--run", default=DEFAULT_DISTILL_RUN, help="run directory (resumes)")
    parser.add_argument("--teacher", help="teacher directory (default: models/animfleet-small)")
    parser.add_argument("--seed", type=int, help="only when starting a run (default: 0)")
    parser.add_argument(
        "--teacher-steps", type=int, help="teacher sampling steps per target (default: 32)"
    )
    parser.add_argument("--student-steps", type=int, help="steps the student serves (default: 8)")
    parser.add_argument(
        "--image-guidance", type=_pair, help="LOW:HIGH scales learnt (default: 1:2)"
    )
    parser.add_argument("--text-guidance", type=_pair, help="LOW:HIGH scales learnt (default: 1:3)")
    parser.add_argument("--trajectories", type=int, help="teacher samples (default: 1024)")
    parser.add_argument("--steps", type=int, help="student training steps (default: 1500)")
    parser.add_argument("--batch-size", type=int, help="student batch size (default: 16)")
    parser.add_argument("--minutes", type=float, help="stop this stretch after this long")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument(
        "--export",
        nargs="?",
        const=str(SHIPPED_STUDENT_DIR),
        help="write the student here (a bare --export: the shipped student's directory)",
    )


CONFIG_OPTIONS = (
    "seed",
    "teacher",
    "teacher_steps",
    "student_steps",
    "image_guidance",
    "text_guidance",
    "trajectories",
    "steps",
    "batch_size",
)


def distill(args: argparse.Namespace) -> int:
    from tools.training.student.distill import DistillConfig, Distiller

    _threads()
    run = Path(args.run)
    chosen = {name: getattr(args, name) for name in CONFIG_OPTIONS}
    config = DistillConfig(**{k: v for k, v in chosen.items() if v is not None})
    fresh = not (run / "config.json").exists()
    distiller = Distiller(run, config)
    print(f"{'starting' if fresh else 'resuming'} {run} at step {distiller.state.step}")
    distiller.make_targets()
    distiller.train(minutes=args.minutes, checkpoint_every=args.checkpoint_every)
    state = distiller.state
    print(
        f"step {state.step}/{config.steps}: teacher targets {state.target_seconds / 60:.1f} min, "
        f"student {state.seconds / 60:.1f} min; loss curve {run / 'loss.png'}"
    )
    if args.export and state.step >= config.steps:
        print(f"exported to {distiller.export(Path(args.export))}")
    return 0


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=str(SHIPPED_MODEL_DIR), help="a from_pretrained directory"
    )
    parser.add_argument("--out", default="out/eval", help="report, contact sheet and MP4s")
    parser.add_argument("--per-family", type=int, default=64, help="held-out clips per family")
    parser.add_argument("--steps", default="15,32", help="DPM-Solver++ step counts to evaluate")
    parser.add_argument("--size", type=int, default=32, help="frame width and height, pixels")
    # The shipped model's best scales: its passes predict clean clips, which guidance combines
    # linearly, so scales above 1 extrapolate pixels (ghosting) rather than motion.
    parser.add_argument("--image-guidance", type=float, default=1.0, help="image guidance scale")
    parser.add_argument("--text-guidance", type=float, default=1.0, help="text guidance scale")
    parser.add_argument("--families", default="pan,zoom,rotate,bounce,sway", help="comma-separated")
    parser.add_argument(
        "--card", action="store_true", help="rewrite the model's README.md from this report"
    )
    parser.add_argument(
        "--photos",
        action="store_true",
        help="instead: held-out real photographs rendered at --photo-sizes (motion, first "
        "frame, the strip that comes into view vs border replication and upscaling)",
    )
    parser.add_argument("--photo-sizes", default="256,512", help="with --photos: pixels")
    parser.add_argument(
        "--brush",
        action="store_true",
        help="instead: motion-brush regions on held-out photographs at 512 px, scored by "
        "OpenCV optical flow (direction, speed, stillness outside, frame 0, loop closure)",
    )
    parser.add_argument(
        "--fill",
        action="store_true",
        help="instead: the fill of entering strips (pan, zoom out) and opened holes on held-out "
        "photographs against their real surroundings, beside border replication and Telea",
    )
    parser.add_argument(
        "--fill-photos", default=None, help="with --fill: comma-separated photograph names"
    )
    parser.add_argument(
        "--student",
        nargs="?",
        const=str(SHIPPED_STUDENT_DIR),
        help="compare this distilled student with --model as its teacher (32x3, 15x3, 8x3 "
        "teacher vs 8x1, 4x1 student); default directory: the shipped student",
    )
    parser.add_argument(
        "--guidance",
        default="1:1,2:3",
        help="with --student: IMAGE:TEXT guidance settings to compare at, comma-separated",
    )


def evaluate(args: argparse.Namespace) -> int:
    from tools.training.evaluation.evaluate import EvalSettings, run_eval

    _threads()
    if args.brush:
        return evaluate_brush(args)
    if args.fill:
        return evaluate_fill(args)
    if args.photos:
        return evaluate_photos(args)
    if args.student:
        return compare(args)
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
        from tools.training.base.card import write_card

        report_json = json.loads((Path(args.out) / "report.json").read_text())
        print(f"model card: {write_card(Path(args.model), report_json)}")
    return 0


def evaluate_brush(args: argparse.Namespace) -> int:
    from tools.training.evaluation.brush_edges import edge_report, edge_summary, run_edge_eval
    from tools.training.evaluation.brush_eval import run_brush_eval, served_animator, summary

    animator = served_animator(Path(args.model))  # the worker's own: edge fill, renderer
    regions, clips = run_brush_eval(animator, Path(args.out))
    table, passed = summary(regions, clips)
    edges = run_edge_eval()
    lines, checks = edge_summary(edges)
    print(table)
    print("\n" + "\n".join(lines) + "\n")
    print("\n".join(f"{'PASS' if ok else 'FAIL'} {text}" for ok, text in checks))
    (Path(args.out) / "brush_edges.json").write_text(json.dumps(edge_report(edges), indent=2))
    print(f"report: {Path(args.out) / 'brush.json'}, {Path(args.out) / 'brush_edges.json'}")
    return 0 if passed and all(ok for ok, _ in checks) else 1


def evaluate_fill(args: argparse.Namespace) -> int:
    from tools.training.evaluation.fill_eval import EVAL_PHOTOS, run_fill_eval, summary

    photos = tuple(args.fill_photos.split(",")) if args.fill_photos else EVAL_PHOTOS
    report = run_fill_eval(Path(args.out), photos)
    table = summary(report)
    print(table)
    print(f"report: {Path(args.out) / 'fill.json'}")
    return 0 if table.endswith("overall: PASS") else 1  # a failed bar fails the command


def evaluate_photos(args: argparse.Namespace) -> int:
    from tools.training.evaluation.evaluate import load_pipeline
    from tools.training.evaluation.photo_eval import PhotoEvalSettings, run_photo_eval, summary

    sizes = tuple(int(size) for size in args.photo_sizes.split(","))
    report = run_photo_eval(
        load_pipeline(Path(args.model)), Path(args.out), PhotoEvalSettings(sizes=sizes)
    )
    print(summary(report))
    print(f"report: {Path(args.out) / 'photos.json'}")
    return 0


def compare(args: argparse.Namespace) -> int:
    from tools.training.student.compare import CompareSettings, markdown, run_comparison

    settings = CompareSettings(
        per_family=args.per_family,
        families=tuple(args.families.split(",")),
        guidance=tuple(_two_floats(g) for g in args.guidance.split(",")),
        size=args.size,
    )
    report = run_comparison(Path(args.model), Path(args.student), Path(args.out), settings)
    print(markdown(report))
    print(f"report: {Path(args.out) / 'compare.md'}")
    if args.card:
        import shutil

        from tools.training.base.card import write_student_card

        for sheet in Path(args.out).glob("contact_sheet_g*.png"):
            shutil.copyfile(sheet, Path(args.student) / sheet.name)
        print(f"model card: {write_student_card(Path(args.student), markdown(report), report)}")
    return 0


def _two_floats(text: str) -> tuple[float, float]:
    image, text_scale = (float(part) for part in text.split(":"))
    return image, text_scale


DEFAULT_SLIM_RUN = "run/slim"


def _shares(text: str) -> tuple[float, ...]:
    shares = tuple(float(part) for part in text.split(","))
    if not all(0 < share <= 1 for share in shares):
        raise argparse.ArgumentTypeError(f"expected shares in (0, 1], got {text!r}")
    return shares


def add_slim_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults of SlimConfig live in tools/training/slim/distill.py (torch); stated here again
    # only in the help texts.
    parser.add_argument(
        "action",
        choices=("plan", "train", "eval"),
        help="plan: widths per share (no training); train: every arm (resumable); "
        "eval: the comparison table, and with --ship the served variant",
    )
    parser.add_argument("--run", default=DEFAULT_SLIM_RUN, help="run directory, one per arm")
    parser.add_argument(
        "--shares",
        type=_shares,
        default=(0.7, 0.8, 0.9),
        help="filter-variance shares to keep, comma-separated",
    )
    parser.add_argument("--steps", type=int, default=1200, help="distillation steps per arm")
    parser.add_argument("--minutes", type=float, help="stop training after this long in all")
    parser.add_argument("--per-family", type=int, default=64, help="eval: held-out clips")
    parser.add_argument("--out", default="out/slim", help="eval: report directory")
    parser.add_argument(
        "--ship",
        nargs="?",
        const="models/animfleet-small-slim",
        help="eval: export the best arm that meets the bar here, with its card",
    )


def slim(args: argparse.Namespace) -> int:
    _threads()
    run = Path(args.run)
    if args.action == "plan":
        from tools.training.slim.evaluate import print_plans

        print_plans(args.shares)
    elif args.action == "train":
        from tools.training.slim.distill import train_arms

        done = train_arms(run, args.shares, args.steps, minutes=args.minutes)
        print(f"{len(done)} of {2 * len(args.shares)} arms trained to {args.steps} steps")
    else:
        from tools.training.slim.evaluate import run_slim_eval

        run_slim_eval(run, args.shares, Path(args.out), args.per_family, args.ship)
    return 0
