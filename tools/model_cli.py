"""``animfleet model ...``, ``train``, ``train-fill``, ``distill``, ``eval``, ``slim``: the
commands that make, measure and ship model files. Each command imports its (heavy) module only
when it runs; building the parser imports only argument definitions."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_model_init(args: argparse.Namespace) -> int:
    if args.family is not None:
        from tools.families.tiny import build_tiny

        path = build_tiny(args.family, args.directory, seed=args.seed)
        print(f"wrote a tiny random-weight {args.family} checkpoint to {path}")
        return 0
    from workers.model.pipelines.build import init_model

    path = init_model(args.directory, seed=args.seed)
    print(f"wrote a random-weight pipeline to {path}")
    return 0


def cmd_model_tune(args: argparse.Namespace) -> int:
    from tools.serving.cli import run_tune

    return run_tune(args)


def cmd_model_compile(args: argparse.Namespace) -> int:
    from tools.serving.cli import run_compile

    return run_compile(args)


def cmd_train_fill(args: argparse.Namespace) -> int:
    from tools.training.fill.train_cli import train_fill

    return train_fill(args)


def cmd_train(args: argparse.Namespace) -> int:
    from tools.training.commands import train

    return train(args)


def cmd_distill(args: argparse.Namespace) -> int:
    from tools.training.commands import distill

    return distill(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from tools.training.commands import evaluate

    return evaluate(args)


def cmd_slim(args: argparse.Namespace) -> int:
    from tools.training.commands import slim

    return slim(args)


def add_model_commands(sub: Any) -> None:
    """Add the model and training commands to ``sub`` (the CLI's subparsers)."""
    from tools.registry_cli import add_registry_commands
    from tools.serving.cli import add_compile_arguments, add_tune_arguments
    from tools.training.commands import (
        add_distill_arguments,
        add_eval_arguments,
        add_slim_arguments,
        add_train_arguments,
    )
    from tools.training.fill.train_cli import add_arguments as add_fill_arguments

    model = sub.add_parser("model", help="model files").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    init = model.add_parser("init", help="write a random-weight pipeline directory")
    init.add_argument("directory", help="where to write it")
    init.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    init.add_argument(
        "--family",
        help="a tiny checkpoint of an image-to-video family instead of the built-in model: "
        "svd, ltx, ltx-condition, wan, wan2.2, cogvideox",
    )
    init.set_defaults(func=cmd_model_init)
    tune = model.add_parser(
        "tune", help="measure serving configurations; write the fastest correct as the profile"
    )
    add_tune_arguments(tune)
    tune.set_defaults(func=cmd_model_tune)
    aot = model.add_parser("compile", help="build ahead-of-time U-Net packages per shape bucket")
    add_compile_arguments(aot)
    aot.set_defaults(func=cmd_model_compile)
    add_registry_commands(model)  # push, list, show

    train = sub.add_parser("train", help="train the small model (resumable; state in --run)")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)

    train_fill = sub.add_parser(
        "train-fill", help="train the edge fill for full-size rendering (resumable)"
    )
    add_fill_arguments(train_fill)
    train_fill.set_defaults(func=cmd_train_fill)

    distill = sub.add_parser(
        "distill", help="distil the teacher into a one-pass, 8-step student (resumable)"
    )
    add_distill_arguments(distill)
    distill.set_defaults(func=cmd_distill)

    evaluate = sub.add_parser("eval", help="evaluate a model directory on the held-out clips")
    add_eval_arguments(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    slim = sub.add_parser(
        "slim", help="PCA-slim the served student: widths from its weights, then distil"
    )
    add_slim_arguments(slim)
    slim.set_defaults(func=cmd_slim)
