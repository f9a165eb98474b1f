"""``python -m tools.training.addons.control_cli``: train, export, evaluate and card the motion-path
add-on (the image-conditioned, ControlNet-style branch).

``train --run run/addons/path --out models/addons/path`` trains (resuming the run if it
exists), exports the branch, evaluates it on held-out scenes as workers serve it and writes
the card; ``eval --addon models/addons/path`` re-evaluates a shipped one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tools.training.addons.lora_cli import finish, parser_for, reevaluate, use_threads

CARD = """# Image-conditioned add-on: {name} (motion path)

A small ControlNet-style branch ({parameters} parameters, {bytes} bytes) beside `{base}`'s
U-Net. It reads a **control image: a motion path drawn over the frame**, a stroke that fades
in from faint grey at its start to white at its end (a dot there), light on dark (dark on
light is inverted), and **the content moves along the path**: by its length, from its start
towards its end, at constant speed over the clip. Four 3x3 convolutions over the image
(read at 64x64, fitted to the job's aspect like the input image) and its coordinates, then
zero-initialised outputs add residuals to the U-Net's bottleneck features and to its motion
head's first hidden layer. The base weights are never touched, so jobs without it are
bit-identical to the base model. The residuals depend on the control image only: workers
compute them once per job, beside the job's conditioning.

Ask for it per request with a still prompt and the image riding with the add-on:
`"addons": [{{"name": "{name}", "scale": 1.0, "image": "data:image/png;base64,..."}}]`.

## Training

```
ANIMFLEET_TORCH_THREADS=1 nice -n 10 .venv/bin/python -m tools.training.addons.control_cli train \\
    --run run/addons/{name} --out models/addons/{name} --steps {steps} \\
    --learning-rate {lr} --flow-weight {flow_weight} --seed {seed}
```

Seed {seed}, {steps} steps of batch {batch_size} (procedural clips {size}x{size}, {frames}
frames: a random scene, a random path of length 0.3-0.9 frame half-widths in any direction,
the content panning along it; 10% blank control images that must not move), learning rate
{lr}, flow weight {flow_weight}, {seconds:.0f} s on one CPU thread. The student is frozen.
The first {pretrain} steps teach the encoder to read a path (the path's displacement
regressed from its pooled features, control images alone, batch {pretrain_batch}); then the
loss is the clean-clip MSE plus the flow MSE against the known truth through the frozen
student, plus that regression. Loss: `loss.png`.

## Measured on held-out scenes and paths

{clips} clips with a path and {blank} with a blank control image, {eval_steps} steps,
{eval_size}x{eval_size}. A clip follows its path when the displacement measured on its frames
(a Lucas-Kanade fit of the last frame to the first) points within {tolerance} degrees of the
path.

| | follows the path |
|---|---|
| base model alone | {base_accuracy:.1%} |
| base + this add-on | **{accuracy:.1%}** |

Median angle error {angle} degrees; median measured length / path length {ratio}; blank
control images: largest measured motion {blank_motion} (frame half-widths).
Base motions unchanged when the add-on is not requested (pan, zoom and rotate jobs with the
branch installed, unused, and after a job used it): bit-identical frames: {identical}.
"""


def write_card(out: Path, training: dict[str, Any], result: dict[str, Any]) -> Path:
    """The add-on's README.md from its training summary and evaluation."""
    cfg = training["config"]
    text = CARD.format(
        name=result["addon"],
        parameters=training["parameters"],
        bytes=training["bytes"],
        base=Path(cfg["base"]).name,
        steps=training["steps"],
        lr=cfg["learning_rate"],
        flow_weight=cfg["flow_weight"],
        seed=cfg["seed"],
        batch_size=cfg["batch_size"],
        size=cfg["size"],
        frames=cfg["num_frames"],
        seconds=training["train_seconds"],
        pretrain=cfg["pretrain_steps"],
        pretrain_batch=cfg["pretrain_batch"],
        clips=result["clips"],
        blank=result["blank_clips"],
        eval_steps=result["steps"],
        eval_size=result["size"],
        tolerance=result["angle_tolerance_deg"],
        base_accuracy=result["base_model_accuracy"],
        accuracy=result["motion_accuracy"],
        angle=result["median_angle_error_deg"],
        ratio=result["median_length_ratio"],
        blank_motion=result["blank_control_max_motion"],
        identical=result["base_bit_identical_without_addon"],
    )
    path = out / "README.md"
    path.write_text(text)
    return path


def train(args: argparse.Namespace) -> int:
    from tools.training.addons.control import ControlConfig, ControlTrainer, evaluate_control

    use_threads()
    run = Path(args.run)
    config = None
    if not (run / "config.json").exists():
        config = ControlConfig(
            name=Path(args.out).name,
            steps=args.steps,
            seed=args.seed,
            learning_rate=args.learning_rate,
            flow_weight=args.flow_weight,
        )
    return finish(ControlTrainer(run, config), args, evaluate_control, write_card)


def evaluate(args: argparse.Namespace) -> int:
    from tools.training.addons.control import evaluate_control

    return reevaluate(args, evaluate_control, write_card)


def main(argv: list[str] | None = None) -> int:
    # The add-on directory's name is the branch's name (``--out models/addons/path``).
    parser, _ = parser_for(
        "python -m tools.training.addons.control_cli",
        "the branch",
        1800,
        flow_weight=30.0,
        clips=64,
    )
    args = parser.parse_args(argv)
    return int({"train": train, "eval": evaluate}[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
