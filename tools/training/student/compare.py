"""``animfleet eval --student``: the distilled student against its teacher, in one run.

Five arms animate every held-out clip from the same seed: the teacher at 32 steps x 3 passes
(the reference), 15 x 3 and 8 x 3, and the student at 8 x 1 and 4 x 1. Reported per arm: PSNR
and SSIM against the reference and against ground truth, motion accuracy, U-Net evaluations per
video (counted on the U-Net's forward, one per batch row) and the median latency per video. The
arms run one after another on each clip, so they share the machine's load.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from tools.training.data.scenes import heldout_sample
from tools.training.evaluation.evaluate import contact_sheet, load_pipeline
from tools.training.evaluation.frame_metrics import Frames, psnr, ssim, to_uint8
from tools.training.evaluation.motion_estimate import classify
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams


@dataclass(frozen=True)
class Arm:
    name: str
    model: str  # "teacher" | "student"
    steps: int


ARMS = (
    Arm("teacher 32x3", "teacher", 32),
    Arm("teacher 15x3", "teacher", 15),
    Arm("teacher 8x3", "teacher", 8),
    Arm("student 8x1", "student", 8),
    Arm("student 4x1", "student", 4),
)
REFERENCE = ARMS[0]
SHEET_ARMS = ("teacher 32x3", "teacher 8x3", "student 8x1", "student 4x1")


@dataclass(frozen=True)
class CompareSettings:
    per_family: int = 64
    families: tuple[str, ...] = ("pan", "zoom", "rotate", "bounce", "sway")
    # (image, text) guidance settings, each evaluated in full: the serving scales first.
    guidance: tuple[tuple[float, float], ...] = ((1.0, 1.0), (2.0, 3.0))
    size: int = 32
    num_frames: int = 8
    fps: int = 8


@dataclass
class ArmResult:
    psnr_ref: list[float] = field(default_factory=list)
    ssim_ref: list[float] = field(default_factory=list)
    psnr_truth: list[float] = field(default_factory=list)
    ssim_truth: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    evaluations: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def summary(self, reference_seconds: float) -> dict[str, float]:
        latency = statistics.median(self.seconds)
        return {
            "clips": len(self.correct),
            "psnr_vs_reference": round(float(np.mean(self.psnr_ref)), 2),
            "ssim_vs_reference": round(float(np.mean(self.ssim_ref)), 4),
            "psnr_vs_truth": round(float(np.mean(self.psnr_truth)), 2),
            "ssim_vs_truth": round(float(np.mean(self.ssim_truth)), 4),
            "motion_accuracy": round(float(np.mean(self.correct)), 4),
            "unet_evaluations": round(float(np.mean(self.evaluations)), 1),
            "median_latency_s": round(latency, 4),
            "speedup_vs_reference": round(reference_seconds / latency, 2),
        }


class EvaluationCounter:
    """Counts U-Net evaluations: one per batch row of every forward call."""

    def __init__(self, unet: torch.nn.Module) -> None:
        self.count = 0
        unet.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        sample = args[0] if args else kwargs["sample"]
        self.count += int(sample.shape[0])


def _run(
    pipe: AnimationPipeline,
    counter: EvaluationCounter,
    image: Frames,
    prompt: str,
    steps: int,
    guidance: tuple[float, float],
    seed: int,
    settings: CompareSettings,
) -> tuple[Frames, int, float]:
    counter.count = 0
    started = time.perf_counter()
    params = GenerationParams(
        prompt,
        num_frames=settings.num_frames,
        fps=settings.fps,
        num_inference_steps=steps,
        image_guidance_scale=guidance[0],
        text_guidance_scale=guidance[1],
        seed=seed,
    )
    frames: Frames = pipe(image, params)
    return frames, counter.count, time.perf_counter() - started


def run_comparison(
    teacher_dir: Path, student_dir: Path, out: Path, settings: CompareSettings
) -> dict[str, Any]:
    """Evaluate all arms; write ``compare.json``, ``compare.md`` and contact sheets to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    pipes = {"teacher": load_pipeline(teacher_dir), "student": load_pipeline(student_dir)}
    if not pipes["student"].guidance_distilled:
        raise ValueError(f"{student_dir} is not a guidance-distilled student")
    counters = {name: EvaluationCounter(pipe.unet) for name, pipe in pipes.items()}
    results: dict[str, dict[str, Any]] = {}
    total = len(settings.guidance) * len(settings.families) * settings.per_family * len(ARMS)
    with tqdm(total=total, desc="compare", unit="video") as bar:
        for guidance in settings.guidance:
            arms: dict[str, ArmResult] = defaultdict(ArmResult)
            sheet: list[Frames] = []
            for family in settings.families:
                for index in range(settings.per_family):
                    sample = heldout_sample(family, index, settings.size, settings.num_frames)
                    truth = to_uint8(sample.video)
                    image = np.ascontiguousarray(truth[0])
                    made: dict[str, Frames] = {}
                    for arm in ARMS:
                        frames, evaluations, seconds = _run(
                            pipes[arm.model],
                            counters[arm.model],
                            image,
                            sample.prompt,
                            arm.steps,
                            guidance,
                            index,
                            settings,
                        )
                        made[arm.name] = frames
                        result = arms[arm.name]
                        result.evaluations.append(evaluations)
                        result.seconds.append(seconds)
                        result.psnr_truth.append(psnr(frames[1:], truth[1:]))
                        result.ssim_truth.append(ssim(frames[1:], truth[1:]))
                        result.correct.append(classify(torch.from_numpy(frames)) is sample.motion)
                        bar.update(1)
                    reference = made[REFERENCE.name]
                    for arm in ARMS:
                        arms[arm.name].psnr_ref.append(psnr(made[arm.name][1:], reference[1:]))
                        arms[arm.name].ssim_ref.append(ssim(made[arm.name][1:], reference[1:]))
                    if index == 0:
                        sheet += [truth, *(made[name] for name in SHEET_ARMS)]
            key = f"image {guidance[0]:g}, text {guidance[1]:g}"
            reference_seconds = statistics.median(arms[REFERENCE.name].seconds)
            results[key] = {a.name: arms[a.name].summary(reference_seconds) for a in ARMS}
            name = f"contact_sheet_g{guidance[0]:g}_{guidance[1]:g}.png"
            contact_sheet(sheet, out / name)
    report = {
        "teacher": str(teacher_dir),
        "student": str(student_dir),
        "settings": asdict(settings),
        "results": results,
        "bar": {key: check_bar(rows) for key, rows in results.items()},
    }
    (out / "compare.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "compare.md").write_text(markdown(report) + "\n")
    return report


def check_bar(rows: dict[str, dict[str, float]]) -> dict[str, bool]:
    """The distillation bar, for one guidance setting: 12x fewer evaluations, closer to the
    reference than the teacher at 8 steps, motion accuracy within 3 points, latency >= 8x lower."""
    reference, teacher8, student = rows[REFERENCE.name], rows["teacher 8x3"], rows["student 8x1"]
    return {
        "12x fewer U-Net evaluations": (
            reference["unet_evaluations"] >= 12 * student["unet_evaluations"]
        ),
        "closer to the reference than teacher 8x3": (
            student["psnr_vs_reference"] > teacher8["psnr_vs_reference"]
        ),
        "motion accuracy within 3 points": (
            student["motion_accuracy"] >= reference["motion_accuracy"] - 0.03
        ),
        "latency >= 8x lower": student["speedup_vs_reference"] >= 8,
    }


def markdown(report: dict[str, Any]) -> str:
    settings = report["settings"]
    lines = [
        f"{settings['per_family']} held-out clips per family ({', '.join(settings['families'])}),"
        f" {settings['size']}x{settings['size']}, {settings['num_frames']} frames; reference ="
        f" {REFERENCE.name}. PSNR vs the reference on identical frames is capped at 99 dB.",
    ]
    for key, rows in report["results"].items():
        lines += [
            "",
            f"### Guidance: {key}",
            "",
            "| arm | U-Net evals / video | median latency (s) | speed-up | PSNR vs ref"
            " | SSIM vs ref | PSNR vs truth | SSIM vs truth | motion accuracy |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for arm, row in rows.items():
            lines.append(
                f"| {arm} | {row['unet_evaluations']:g} | {row['median_latency_s']:.3f} "
                f"| {row['speedup_vs_reference']:.1f}x | {row['psnr_vs_reference']:.2f} "
                f"| {row['ssim_vs_reference']:.4f} | {row['psnr_vs_truth']:.2f} "
                f"| {row['ssim_vs_truth']:.4f} | {row['motion_accuracy']:.1%} |"
            )
        lines.append("")
        for item, met in report["bar"][key].items():
            lines.append(f"- {'met' if met else 'NOT met'}: {item}")
    return "\n".join(lines)
