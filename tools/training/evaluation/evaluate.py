"""``animfleet eval``: a model directory against the held-out clips, per prompt family.

For every held-out clip and step count, the real ``AnimationPipeline`` (three-pass guidance,
DPM-Solver++) animates frame 0 with the clip's prompt. Reported per family: motion accuracy (the
classifier of :mod:`tools.training.evaluation.motion_estimate` against all prompt motions plus
``static``),
PSNR and SSIM of frames 1.. against ground truth next to the "copy the input into every frame"
baseline, and temporal consistency (mean residual after the fitted global motion).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

import workers.model  # noqa: F401  (registers MotionUNet and PixelCodec for from_pretrained)
from tools.training.data.scenes import heldout_sample
from tools.training.evaluation.frame_metrics import Frames, psnr, ssim, to_uint8
from tools.training.evaluation.motion_estimate import classify, estimate
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams

SHEET_SAMPLES = 2  # per family in the contact sheet
VIDEOS = 1  # MP4s per family


@dataclass(frozen=True)
class EvalSettings:
    per_family: int = 64
    steps: tuple[int, ...] = (15, 32)
    size: int = 32
    num_frames: int = 8
    fps: int = 8
    image_guidance_scale: float = 1.0
    text_guidance_scale: float = 1.0
    families: tuple[str, ...] = ("pan", "zoom", "rotate", "bounce", "sway")


@dataclass
class FamilyResult:
    """Sums over a family's clips; the report divides by ``count``."""

    count: int = 0
    correct: int = 0
    psnr: float = 0.0
    ssim: float = 0.0
    copy_psnr: float = 0.0
    copy_ssim: float = 0.0
    temporal_residual: float = 0.0
    truth_temporal_residual: float = 0.0
    predicted: Counter[str] = field(default_factory=Counter)

    def add(self, generated: Frames, truth: Frames, correct: bool, label: str) -> None:
        copy = np.repeat(truth[:1], len(truth), axis=0)
        self.count += 1
        self.correct += int(correct)
        self.psnr += psnr(generated[1:], truth[1:])
        self.ssim += ssim(generated[1:], truth[1:])
        self.copy_psnr += psnr(copy[1:], truth[1:])
        self.copy_ssim += ssim(copy[1:], truth[1:])
        self.temporal_residual += float(estimate(torch.from_numpy(generated)).residual[1:].mean())
        self.truth_temporal_residual += float(estimate(torch.from_numpy(truth)).residual[1:].mean())
        self.predicted[label] += 1

    def summary(self) -> dict[str, object]:
        n = max(self.count, 1)
        return {
            "clips": self.count,
            "motion_accuracy": round(self.correct / n, 4),
            "psnr": round(self.psnr / n, 2),
            "copy_psnr": round(self.copy_psnr / n, 2),
            "ssim": round(self.ssim / n, 4),
            "copy_ssim": round(self.copy_ssim / n, 4),
            "temporal_residual": round(self.temporal_residual / n, 4),
            "truth_temporal_residual": round(self.truth_temporal_residual / n, 4),
            "predicted": dict(self.predicted.most_common()),
        }


@dataclass
class EvalReport:
    model: str
    settings: EvalSettings
    results: dict[int, dict[str, dict[str, object]]]  # steps -> family -> summary
    seconds: float

    def summary(self) -> str:
        lines = [f"model {self.model}, {self.settings.per_family} held-out clips per family"]
        lines.append(
            f"{'steps':>5} {'family':<7} {'motion acc':>10} {'PSNR':>6} {'copy':>6} "
            f"{'SSIM':>6} {'copy':>6} {'temporal':>8}"
        )
        for steps, families in self.results.items():
            for family, row in families.items():
                lines.append(
                    f"{steps:>5} {family:<7} {row['motion_accuracy']:>10.1%} {row['psnr']:>6.2f} "
                    f"{row['copy_psnr']:>6.2f} {row['ssim']:>6.3f} {row['copy_ssim']:>6.3f} "
                    f"{row['temporal_residual']:>8.4f}"
                )
        lines.append(f"evaluated in {self.seconds:.0f}s")
        return "\n".join(lines)


def load_pipeline(model: Path) -> AnimationPipeline:
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.set_verbosity_error()
    pipe: AnimationPipeline = AnimationPipeline.from_pretrained(str(model))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run_eval(model: Path, out: Path, settings: EvalSettings) -> EvalReport:
    """Evaluate ``model``; write ``report.json``, ``report.txt``, a contact sheet and MP4s."""
    from workers.encode import encode_mp4

    out.mkdir(parents=True, exist_ok=True)
    pipe = load_pipeline(model)
    started = time.perf_counter()
    results: dict[int, dict[str, FamilyResult]] = {
        steps: defaultdict(FamilyResult) for steps in settings.steps
    }
    sheet_rows: list[Frames] = []
    total = len(settings.families) * settings.per_family * len(settings.steps)
    with tqdm(total=total, desc="eval", unit="clip") as bar:
        for family in settings.families:
            for index in range(settings.per_family):
                sample = heldout_sample(family, index, settings.size, settings.num_frames)
                truth = to_uint8(sample.video)
                for steps in settings.steps:
                    params = GenerationParams(
                        sample.prompt,
                        num_frames=settings.num_frames,
                        fps=settings.fps,
                        num_inference_steps=steps,
                        image_guidance_scale=settings.image_guidance_scale,
                        text_guidance_scale=settings.text_guidance_scale,
                        seed=index,
                    )
                    generated = pipe(np.ascontiguousarray(truth[0]), params)
                    label = classify(torch.from_numpy(generated))
                    results[steps][family].add(generated, truth, label is sample.motion, label)
                    bar.update(1)
                    if steps == settings.steps[0] and index < SHEET_SAMPLES:
                        sheet_rows += [truth, generated]
                    if steps == settings.steps[0] and index < VIDEOS:
                        name = f"{family}-{index}-{sample.prompt.replace(' ', '_')}.mp4"
                        (out / name).write_bytes(encode_mp4(_enlarge(generated), settings.fps))
    report = EvalReport(
        model=str(model),
        settings=settings,
        results={
            steps: {family: r.summary() for family, r in by_family.items()}
            for steps, by_family in results.items()
        },
        seconds=time.perf_counter() - started,
    )
    (out / "report.json").write_text(
        json.dumps({**asdict(report), "settings": asdict(settings)}, indent=2)
    )
    (out / "report.txt").write_text(report.summary() + "\n")
    contact_sheet(sheet_rows, out / "contact_sheet.png")
    return report


def _enlarge(frames: Frames, factor: int = 4) -> Frames:
    """Nearest-neighbour upscaling so tiny clips are watchable (and H.264 gets even sides)."""
    enlarged: Frames = frames.repeat(factor, axis=1).repeat(factor, axis=2)
    return enlarged


def contact_sheet(rows: list[Frames], path: Path, scale: int = 3) -> Path:
    """One row per clip (ground truth above each generated clip), frames left to right."""
    strips = [np.concatenate(list(frames), axis=1) for frames in rows]
    sheet = np.concatenate(strips, axis=0)
    image = Image.fromarray(sheet)
    image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST).save(path)
    return path
