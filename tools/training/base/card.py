"""The model card (README.md of a shipped model directory), written from measured numbers.

The prose that does not change between exports lives in ``card_template.md`` next to this file;
this module fills in the training state (``training.json``, written by export) and the latest
``animfleet eval`` report, so the card never states a number that was not measured on the
weights beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).with_name("card_template.md")


def _eval_table(report: dict[str, Any]) -> str:
    rows = [
        "| steps | family | clips | motion accuracy | PSNR (dB) | copy PSNR | SSIM | copy SSIM "
        "| temporal residual (truth) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for steps, families in report["results"].items():
        for family, row in families.items():
            rows.append(
                f"| {steps} | {family} | {row['clips']} | {row['motion_accuracy']:.1%} "
                f"| {row['psnr']:.2f} | {row['copy_psnr']:.2f} | {row['ssim']:.3f} "
                f"| {row['copy_ssim']:.3f} | {row['temporal_residual']:.4f} "
                f"({row['truth_temporal_residual']:.4f}) |"
            )
    return "\n".join(rows)


def _confusions(report: dict[str, Any]) -> str:
    lines = []
    for steps, families in report["results"].items():
        for family, row in families.items():
            shown = ", ".join(f"{label} {count}" for label, count in row["predicted"].items())
            lines.append(f"- {steps} steps, {family}: {shown}")
    return "\n".join(lines)


def write_card(model_dir: Path, report: dict[str, Any], notes: str = "") -> Path:
    """Write ``model_dir/README.md`` from the template, ``training.json`` and ``report``."""
    training = json.loads((model_dir / "training.json").read_text())
    settings = report["settings"]
    params = training.get("parameters", {})
    values = {
        "steps": str(training["steps"]),
        "train_minutes": f"{training['train_seconds'] / 60:.0f}",
        "steps_per_second": f"{training['steps'] / max(training['train_seconds'], 1):.1f}",
        "seconds_per_step": f"{training['train_seconds'] / max(training['steps'], 1):.2f}",
        "config": json.dumps(training["config"]),
        "unet_params": f"{params.get('unet', 0):,}",
        "text_params": f"{params.get('text_encoder', 0):,}",
        "eval_table": _eval_table(report),
        "confusions": _confusions(report),
        "eval_clips": str(settings["per_family"]),
        "eval_size": str(settings["size"]),
        "image_guidance": str(settings["image_guidance_scale"]),
        "text_guidance": str(settings["text_guidance_scale"]),
        "notes": notes,
    }
    text = TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    path = model_dir / "README.md"
    path.write_text(text)
    return path


STUDENT_TEMPLATE = Path(__file__).with_name("student_card_template.md")


def write_student_card(model_dir: Path, compare_markdown: str, report: dict[str, Any]) -> Path:
    """Write the distilled student's ``README.md`` from ``distillation.json``, its
    ``serving.json`` and an ``animfleet eval --student`` report."""
    summary = json.loads((model_dir / "distillation.json").read_text())
    serving = json.loads((model_dir / "serving.json").read_text())
    config = summary["config"]
    first = next(iter(report["results"].values()))
    values = {
        "student_evals": f"{first['student 8x1']['unet_evaluations']:g}",
        "reference_evals": f"{first['teacher 32x3']['unet_evaluations']:g}",
        "student_steps": str(serving["steps"]),
        "serving_image": f"{serving['image_guidance_scale']:g}",
        "serving_text": f"{serving['text_guidance_scale']:g}",
        "image_range": " to ".join(f"{v:g}" for v in serving["guidance_range"]["image"]),
        "text_range": " to ".join(f"{v:g}" for v in serving["guidance_range"]["text"]),
        "parameters": f"{summary['parameters']:,}",
        "trajectories": f"{config['trajectories']:,}",
        "serving_share": f"{config['serving_share']:.0%}",
        "teacher_steps": str(config["teacher_steps"]),
        "teacher_evals": f"{summary['teacher_unet_evaluations']:,}",
        "target_minutes": f"{summary['target_seconds'] / 60:.0f}",
        "train_steps": f"{summary['steps']:,}",
        "batch_size": str(config["batch_size"]),
        "learning_rate": f"{config['learning_rate']:g}",
        "ema_decay": f"{config['ema_decay']:g}",
        "train_minutes": f"{summary['train_seconds'] / 60:.0f}",
        "compare_table": compare_markdown,
        "notes": "",
    }
    text = STUDENT_TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    path = model_dir / "README.md"
    path.write_text(text)
    return path
