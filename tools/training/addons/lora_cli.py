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
from typing import Any

from tools.training.data.addon_motions import AddonMotion

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


def record_evaluation(
    out: Path, result: dict[str, Any], card: Callable[[Path, dict[str, Any], dict[str, Any]], Path]
) -> int:
    """Write an evaluated add-on's ``eval.json`` and its card (from ``training.json``)."""
    (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    card(out, json.loads((out / "training.json").read_text()), result)
    print(json.dumps(result, indent=2))
    return 0


def train(args: argparse.Namespace) -> int:
    from tools.training.addons.lora import AddonConfig, AddonTrainer

    use_threads()
    run = Path(args.run)
    fresh = not (run / "config.json").exists()
    config = None
    if fresh:
        config = AddonConfig(
            motion=args.motion,
            steps=args.steps,
            seed=args.seed,
            rank=args.rank,
            alpha=float(args.rank),
            learning_rate=args.learning_rate,
            flow_weight=args.flow_weight,
        )
    trainer = AddonTrainer(run, config)
    trainer.train(args.minutes)
    if trainer.state.step < trainer.config.steps:
        print(f"stopped at step {trainer.state.step}; run again to resume")
        return 0
    out = trainer.export(Path(args.out))
    return _evaluate(out, Path(trainer.config.base), args.clips)


def evaluate(args: argparse.Namespace) -> int:
    use_threads()
    out = Path(args.addon)
    training = json.loads((out / "training.json").read_text())
    return _evaluate(out, Path(training["config"]["base"]), args.clips)


def _evaluate(out: Path, base: Path, clips: int) -> int:
    from tools.training.addons.lora import evaluate_addon

    return record_evaluation(out, evaluate_addon(out, base, clips=clips), write_card)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.training.addons.lora_cli")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("train", help="train (resumable), export, evaluate and card an add-on")
    run.add_argument("--motion", choices=[m.value for m in AddonMotion], required=True)
    run.add_argument("--run", required=True, help="run directory (resumes if present)")
    run.add_argument("--out", required=True, help="the add-on directory to write")
    run.add_argument("--steps", type=int, default=300)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--rank", type=int, default=4, help="LoRA rank (alpha is the same)")
    run.add_argument("--learning-rate", type=float, default=3e-3)
    run.add_argument("--flow-weight", type=float, default=1.0, help="flow MSE's weight")
    run.add_argument("--minutes", type=float, help="stop this stretch after this long")
    run.add_argument("--clips", type=int, default=32, help="held-out clips to evaluate")
    again = sub.add_parser("eval", help="re-evaluate a shipped add-on and rewrite its card")
    again.add_argument("--addon", required=True)
    again.add_argument("--clips", type=int, default=32)
    args = parser.parse_args(argv)
    return int({"train": train, "eval": evaluate}[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
