"""The model card (README.md) of a shipped slimmed student, from its ``slim.json`` (widths, what
PCA found, training cost) and the evaluation report that chose it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CARD = """# {name}

A slimmed copy of the served student
[`animfleet-small-distilled`](../animfleet-small-distilled/README.md): the same one-pass, 8-step
sampler, serving settings and guidance range (`serving.json`), with a thinner U-Net whose
widths were chosen by a PCA of the student's own filters ({method}, {share:.0%} of each layer's
filter variance). {parameters:,} parameters instead of {source_parameters:,}. Select it by name,
like the other shipped models: `ANIMFLEET_MODEL_DIR={name}`, or
`AnimationPipeline.from_pretrained("models/{name}")` after `import workers.model`.

## How the widths were chosen

`animfleet slim` (`tools/training/slim/plan.py`). Each layer's filters (one row per output
channel: kernel and bias) are points; the layer's width at a share `s` is the number of
principal components that keeps `s` of their variance. Layers that write the same channels (a
residual stream, a block's hidden width) share one width, the largest of theirs, rounded up to
a multiple of 8 (every GroupNorm has 8 groups). Per configured width:

| width | current student | this model |
| --- | ---: | ---: |
{width_rows}

Per layer: the PCA width at {share:.0%}, and the share of the layer's filter variance that the
first *width* principal components hold at the width shipped:

| layer | PCA width | variance in the shipped width |
| --- | ---: | ---: |
{layer_rows}

## How it was initialised and trained

Not from scratch: every channel set keeps the filters that best span its principal subspace
(column-pivoted QR on the channels' principal coordinates) and every layer is sliced to them.
GroupNorm and SiLU act channel by channel, so a rotation into the principal basis would change
the network even at full width; real filters keep it exactly the student at full width
(`tests/tools/training/slim/test_plan.py`).

Then distilled from the current student on its own sampling path (`tools/training/
slim_distill.py`, the distillation of `animfleet distill`): its 8-step samples of
{trajectories:,} training scenes at guidance drawn from its range are the targets, at the states
of its 8- and 4-step schedules and uniform timesteps; {steps:,} steps of batch {batch_size},
AdamW {learning_rate:g} with warm-up and cosine decay, EMA {ema_decay} (exported).

Training cost, on one CPU thread of a machine shared with other work: teacher targets
{target_minutes:.1f} min (sampled once, shared by every arm of the comparison), this arm
{train_minutes:.1f} min; every arm: {arm_minutes}.

![distillation loss](loss.png)

## Evaluation

`make eval-slim` (`animfleet slim eval`), one run; `slim_eval.json` beside this card.

{table}

## PCA widths against uniform widths

{finding}

Why the FLOPs differ at equal parameters: a layer's parameters grow with its width squared
whatever its resolution, its FLOPs also with its resolution. The U-Net's deep levels hold most
of the parameters at a sixteenth or less of the first level's pixels, so widths that keep a
full-resolution level wider and cut a deep one harder cost more FLOPs per parameter, and on
this CPU the latency follows the FLOPs only loosely (fixed per-call work does not shrink).

## Limits

- Distilled and evaluated at 32x32, as the student was.
- No `serving_profile.json` yet: a worker serves the safe choice (fp32 eager) until
  `make tune-model SERVED_MODEL={name}` measures one for its device.
- The PCA-vs-uniform verdict rests on one training run per arm: differences of a few
  hundredths of a dB are within what another seed could change.
"""


def write_slim_card(model_dir: Path, report: dict[str, Any], table: str) -> Path:
    """Write ``model_dir``/README.md from its ``slim.json`` and the evaluation ``report``."""
    summary = json.loads((model_dir / "slim.json").read_text())
    config = summary["config"]
    source = json.loads((Path(config["teacher"]) / "unet" / "config.json").read_text())
    blocks = source["block_out_channels"]
    current = {f"block.{i}": w for i, w in enumerate(blocks)}
    current.update({f"up.{i}": w for i, w in enumerate(reversed(blocks))})
    inner = [*blocks, blocks[-1], *reversed(blocks)]
    names = [f"down.{i}" for i in range(len(blocks))] + ["mid"]
    names += [f"up.{i}" for i in range(len(blocks))]
    current.update({f"inner.{n}": w for n, w in zip(names, inner, strict=True)})
    width_rows = "\n".join(
        f"| `{slot}` | {current[slot]} | {width} |" for slot, width in summary["widths"].items()
    )
    layer_rows = "\n".join(
        f"| `{layer}` | {width} | {summary['variance_kept'][layer]:.1%} |"
        for layer, width in summary["layer_widths"].items()
    )
    card = CARD.format(
        name=model_dir.name,
        method="the PCA widths" if summary["method"] == "pca" else "uniform widths",
        share=summary["share"],
        parameters=summary["parameters"],
        source_parameters=summary["source_parameters"],
        width_rows=width_rows,
        layer_rows=layer_rows or "| (uniform widths: no per-layer PCA) | | |",
        trajectories=config["trajectories"],
        steps=summary["steps"],
        batch_size=config["batch_size"],
        learning_rate=config["learning_rate"],
        ema_decay=config["ema_decay"],
        target_minutes=summary["target_seconds"] / 60,
        train_minutes=summary["train_seconds"] / 60,
        table=table,
        finding=finding(report),
        arm_minutes=", ".join(
            f"{name} {row['train_minutes']:.1f} min"
            for name, row in report["rows"].items()
            if "train_minutes" in row
        ),
    )
    path = model_dir / "README.md"
    path.write_text(card)
    return path


def finding(report: dict[str, Any]) -> str:
    """The PCA-vs-uniform verdict from the table, whichever way it falls."""
    rows = report["rows"]
    lines, verdicts = [], []
    for share in report["settings"]["shares"]:
        pca, uniform = (
            rows.get(f"pca-{round(share * 100)}"),
            rows.get(f"uniform-{round(share * 100)}"),
        )
        if pca is None or uniform is None:
            continue
        gap = pca["psnr_vs_truth"] - uniform["psnr_vs_truth"]
        worst = min(min(pca["motion_accuracy"].values()), min(uniform["motion_accuracy"].values()))
        verdicts.append("tie" if abs(gap) <= 0.05 else "pca" if gap > 0 else "uniform")
        lines.append(
            f"- {share:.0%}: PCA {pca['parameters']:,} parameters, "
            f"{pca['mflops_per_unet_call']:.0f} MFLOPs, {pca['speedup']:.2f}x, "
            f"{pca['psnr_vs_truth']:.2f} dB; uniform {uniform['parameters']:,} parameters, "
            f"{uniform['mflops_per_unet_call']:.0f} MFLOPs, {uniform['speedup']:.2f}x, "
            f"{uniform['psnr_vs_truth']:.2f} dB ({gap:+.3f} dB for PCA); lowest family motion "
            f"accuracy of the two {worst:.1%}."
        )
    if verdicts and all(v == "tie" for v in verdicts):
        head = (
            "**PCA widths do not beat uniform widths at equal parameters here.** At every share"
            " the two arms are within 0.05 dB PSNR of each other against ground truth (and of"
            " the current student within half a dB), with the same motion accuracy:"
        )
    elif verdicts and all(v == "pca" for v in verdicts):
        head = "**PCA widths beat uniform widths at equal parameters** (PSNR vs truth):"
    elif verdicts and all(v == "uniform" for v in verdicts):
        head = "**Uniform widths beat PCA widths at equal parameters** (PSNR vs truth):"
    else:
        head = "**Mixed: neither width choice wins at every share** (PSNR vs truth):"
    pairs = [
        (rows[f"pca-{round(x * 100)}"], rows[f"uniform-{round(x * 100)}"])
        for x in report["settings"]["shares"]
        if f"pca-{round(x * 100)}" in rows and f"uniform-{round(x * 100)}" in rows
    ]
    costlier = sum(p["mflops_per_unet_call"] > u["mflops_per_unet_call"] for p, u in pairs)
    slower = sum(p["speedup"] < u["speedup"] for p, u in pairs)
    cost = (
        f"At equal parameters the PCA widths cost more FLOPs per U-Net call at {costlier} of "
        f"{len(pairs)} shares and were slower per video at {slower} of {len(pairs)}."
    )
    return "\n".join([head, "", *lines, "", cost])
