"""``python -m tools.training.addons.lora_cli``: train, export, evaluate and card motion add-ons.

``train --motion shake --run run/addons/shake --out models/addons/shake`` trains (resuming
the run if it exists), exports the LoRA, evaluates it on held-out scenes as workers serve it
and writes the card; ``eval --addon models/addons/shake`` re-evaluates a shipped one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tools.training.data.addon_motions import AddonMotion

if TYPE_CHECKING:
    from tools.training.loop import RunState

CARD = """# Motion add-on: {motion}

A LoRA (rank {rank}, alpha {alpha}, peft `LoraConfig`) on `{base}`'s U-Net layers
{targets}.
It teaches a motion the base model does not know: **{description}**.
Ask for it per request with `"addons": [{{"name": "{motion}", "scale": 1.0}}]` and a still
prompt ("static", "still"); workers run it as a parallel low-rank branch beside the unchanged
base weights, so jobs without it are bit-identical to the base model.

## Training

```
ANIMFLEET_TORCH_THREADS=1 .venv/bin/python -m tools.training.addons.lora_cli train \\
    --motion {motion} --run run/addons/{motion} --out models/addons/{motion} --steps {steps} \\
    --rank {rank} --learning-rate {lr} --flow-weight {flow_weight} --seed {seed}
```

Seed {seed}, {steps} steps of batch {batch_size} (procedural clips, {size}x{size},
{frames} frames), learning rate {lr}, flow weight {flow_weight}, {seconds:.0f} s on one CPU
thread; {parameters} parameters, {bytes} bytes on disk. Loss: `loss.png`.

## Measured (held-out scenes, {clips} clips, {eval_steps} steps, scale {scale})

| | motion accuracy |
|---|---|
| base model alone | {base_accuracy:.1%} |
| base + this add-on | **{accuracy:.1%}** |

Classified by `classify_with_addons` (every prompt motion, every add-on motion, static).
Predicted labels with the add-on: {predicted}.
Base model unchanged when the add-on is not requested: bit-identical frames on every clip:
{identical}.
"""

DESCRIPTIONS = {
    AddonMotion.SHAKE: "shake, a fast horizontal jitter (two periods over the clip)",
    AddonMotion.PULSE: "pulse, the scene breathing: a zoom in and back out",
    AddonMotion.ORBIT: "orbit, the content circling once around its start",
    AddonMotion.WOBBLE: "wobble, a rotation back and forth",
}


def write_card(out: Path, training: dict[str, Any], result: dict[str, Any]) -> Path:
    """The add-on's README.md from its training summary and evaluation."""
    cfg = training["config"]
    text = CARD.format(
        motion=result["motion"],
        description=DESCRIPTIONS[AddonMotion(result["motion"])],
        rank=cfg["rank"],
        alpha=cfg["alpha"],
        base=Path(cfg["base"]).name,
        targets=", ".join(f"`{t}`" for t in cfg["targets"]),
        steps=training["steps"],
        seed=cfg["seed"],
        batch_size=cfg["batch_size"],
        size=cfg["size"],
        frames=cfg["num_frames"],
        lr=cfg["learning_rate"],
        flow_weight=cfg["flow_weight"],
        seconds=training["train_seconds"],
        parameters=training["parameters"],
        bytes=training["bytes"],
        clips=result["clips"],
        eval_steps=result["steps"],
        scale=result["scale"],
        base_accuracy=result["base_model_accuracy"],
        accuracy=result["motion_accuracy"],
        predicted=result["predicted"],
        identical=result["base_bit_identical_without_addon"],
    )
    path = out / "README.md"
    path.write_text(text)
    return path


def use_threads() -> None:
    """Torch's intra-op threads: ``ANIMFLEET_TORCH_THREADS``, else one."""
    import torch

    torch.set_num_threads(int(os.environ.get("ANIMFLEET_TORCH_THREADS", "0")) or 1)


Card = Callable[[Path, dict[str, Any], dict[str, Any]], Path]
# (add-on directory, base model, clips=...) -> the evaluation's result
Evaluation = Callable[..., dict[str, Any]]


class AddonRun(Protocol):
    """What finishing a run needs of an add-on's trainer."""

    config: Any  # with ``steps`` and ``base``
    state: RunState

    def train(self, minutes: float | None = None) -> None: ...
    def export(self, directory: Path) -> Path: ...


def record_evaluation(out: Path, result: dict[str, Any], card: Card) -> int:
    """Write an evaluated add-on's ``eval.json`` and its card (from ``training.json``)."""
    (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    card(out, json.loads((out / "training.json").read_text()), result)
    print(json.dumps(result, indent=2))
    return 0


def finish(trainer: AddonRun, args: argparse.Namespace, evaluation: Evaluation, card: Card) -> int:
    """Train this stretch; once the run is complete, export, evaluate and card the add-on."""
    trainer.train(args.minutes)
    if trainer.state.step < trainer.config.steps:
        print(f"stopped at step {trainer.state.step}; run again to resume")
        return 0
    out = trainer.export(Path(args.out))
    base = Path(trainer.config.base)
    return record_evaluation(out, evaluation(out, base, clips=args.clips), card)


def reevaluate(args: argparse.Namespace, evaluation: Evaluation, card: Card) -> int:
    """Evaluate a shipped add-on again (on the base it was trained on) and rewrite its card."""
    use_threads()
    out = Path(args.addon)
    base = Path(json.loads((out / "training.json").read_text())["config"]["base"])
    return record_evaluation(out, evaluation(out, base, clips=args.clips), card)


def train(args: argparse.Namespace) -> int:
    from tools.training.addons.lora import AddonConfig, AddonTrainer, evaluate_addon

    use_threads()
    run = Path(args.run)
    config = None
    if not (run / "config.json").exists():
        config = AddonConfig(
            motion=args.motion,
            steps=args.steps,
            seed=args.seed,
            rank=args.rank,
            alpha=float(args.rank),
            learning_rate=args.learning_rate,
            flow_weight=args.flow_weight,
        )
    return finish(AddonTrainer(run, config), args, evaluate_addon, write_card)


def evaluate(args: argparse.Namespace) -> int:
    from tools.training.addons.lora import evaluate_addon

    return reevaluate(args, evaluate_addon, write_card)


def parser_for(
    prog: str, what: str, steps: int, flow_weight: float, clips: int
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """An add-on CLI's parser with its ``train`` and ``eval`` commands and their shared options
    (defaults: the add-on's); returns it and ``train``'s parser, for the add-on's own options."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("train", help=f"train (resumable), export, evaluate and card {what}")
    run.add_argument("--run", required=True, help="run directory (resumes if present)")
    run.add_argument("--out", required=True, help="the add-on directory to write")
    run.add_argument("--steps", type=int, default=steps)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--learning-rate", type=float, default=3e-3)
    run.add_argument("--flow-weight", type=float, default=flow_weight, help="flow MSE's weight")
    run.add_argument("--minutes", type=float, help="stop this stretch after this long")
    run.add_argument("--clips", type=int, default=clips, help="held-out clips to evaluate")
    again = sub.add_parser("eval", help=f"re-evaluate a shipped {what} and rewrite its card")
    again.add_argument("--addon", required=True)
    again.add_argument("--clips", type=int, default=clips)
    return parser, run


def main(argv: list[str] | None = None) -> int:
    parser, run = parser_for(
        "python -m tools.training.addons.lora_cli", "an add-on", 300, flow_weight=1.0, clips=32
    )
    run.add_argument("--motion", choices=[m.value for m in AddonMotion], required=True)
    run.add_argument("--rank", type=int, default=4, help="LoRA rank (alpha is the same)")
    args = parser.parse_args(argv)
    return int({"train": train, "eval": evaluate}[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
