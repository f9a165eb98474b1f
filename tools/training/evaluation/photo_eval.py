"""``animfleet eval --photos``: held-out real photographs animated at 256 and 512 px.

Each photograph is the surroundings of a centred square crop (60% of its short side), scaled so
the crop is the requested size: the crop is the input, and the rest of the photograph is what
really lies beyond its edges. For every motion prompt the worker's path runs (the model at its
working size, :func:`workers.model.pipelines.render.render` at full size) and is measured:

* motion accuracy: the independent estimator of :mod:`tools.training.evaluation.motion_estimate` on
  the full-resolution frames, against the prompted motion;
* first-frame PSNR against the input (also on a dark, sparse star field);
* the strip that comes into view (pixels whose warp source lies outside the input, where the
  photograph has them): PSNR against the photograph there, for the edge fill and for two
  baselines on the same predicted motion: border replication (the warp alone), and the model's
  working-size frames upscaled (today's output at this size).

None of these photographs was trained on (:data:`EVAL_PHOTOS`).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm import tqdm

from tools.training.data.motions import Motion, prompt_for
from tools.training.data.photos import EVAL_ONLY, photo_uint8
from tools.training.evaluation.frame_metrics import Frames
from tools.training.evaluation.motion_estimate import classify
from tools.training.fill.data import HELDOUT_PHOTOS
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams
from workers.model.pipelines.render import (
    WorkingClip,
    downsample,
    outside,
    predict,
    render,
    sampling_grid,
    to_uint8,
    upscale,
    working_size,
)

EVAL_PHOTOS = (*EVAL_ONLY, *HELDOUT_PHOTOS)
CROP_SHARE = 0.6
FAMILY_BARS = {"pan": 0.95, "zoom": 0.95, "rotate": 0.95, "bounce": 0.90, "sway": 0.90}
FIRST_FRAME_BAR_DB = 40.0
METHODS = ("fill", "border", "upscaled")


@dataclass(frozen=True)
class PhotoEvalSettings:
    sizes: tuple[int, ...] = (256, 512)
    photos: tuple[str, ...] = EVAL_PHOTOS
    speeds: tuple[str, ...] = ("normal", "fast")
    num_frames: int = 8
    fps: int = 8
    steps: int = 8
    image_guidance_scale: float = 1.0
    text_guidance_scale: float = 1.0
    # The estimator follows motions up to a few pixels a frame: it reads the rendered frames
    # downsampled to this side, as it reads the 32-64 px clips of the synthetic evaluation.
    classify_side: int = 64


@dataclass
class SizeResult:
    """Sums for one output size."""

    clips: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    correct: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    first_frame_db: dict[str, float] = field(default_factory=dict)  # image -> worst PSNR
    strip_sq: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    strip_pixels: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        accuracy = {f: round(self.correct[f] / max(n, 1), 4) for f, n in self.clips.items()}
        strip = {
            method: round(_psnr(self.strip_sq[method] / max(self.strip_pixels, 1)), 2)
            for method in METHODS
        }
        return {
            "clips": dict(self.clips),
            "motion_accuracy": accuracy,
            "first_frame_psnr_db": self.first_frame_db,
            "strip_psnr_db": strip,
            "strip_pixels": self.strip_pixels,
            "seconds": round(self.seconds, 1),
        }


def _psnr(mse: float) -> float:
    return 99.0 if mse <= 0 else 10 * math.log10(255.0**2 / mse)


def measured(frames: Frames, side: int) -> torch.Tensor:
    """Frames (F, side, side, 3) uint8, area-downsampled, for the motion estimator."""
    video = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    small = F.interpolate(video, size=(side, side), mode="area")
    return small.round().to(torch.uint8).permute(0, 2, 3, 1)


def frame0_psnr(frames: Frames, image: Frames) -> float:
    error = float(np.mean((frames[0].astype(np.float64) - image.astype(np.float64)) ** 2))
    return _psnr(error)


def scene(photo: Frames, size: int) -> tuple[Frames, torch.Tensor, tuple[int, int, int]]:
    """The input (size, size, 3), the scaled photograph (1, 3, H, W) in [-1, 1] and where the
    input lies in it (top, left, side)."""
    height, width = photo.shape[:2]
    crop = CROP_SHARE * min(height, width)
    scale = size / crop
    canvas_size = (round(width * scale), round(height * scale))
    canvas = np.asarray(Image.fromarray(photo).resize(canvas_size, Image.Resampling.LANCZOS))
    top = (canvas.shape[0] - size) // 2
    left = (canvas.shape[1] - size) // 2
    image = np.ascontiguousarray(canvas[top : top + size, left : left + size])
    tensor = torch.from_numpy(np.array(canvas)).permute(2, 0, 1)[None].float() / 127.5 - 1
    return image, tensor, (top, left, size)


def strip_truth(
    clip: WorkingClip, canvas: torch.Tensor, where: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the photograph shows where each frame's pixels come from, (F, H, W, 3) uint8,
    and the strip mask (F, H, W): pixels from outside the input that the photograph has."""
    top, left, size = where
    flow = F.interpolate(clip.flow, size=(size, size), mode="bilinear", align_corners=False)
    grid = sampling_grid(flow)  # in the input's units
    height, width = canvas.shape[-2:]
    gx = (left + (grid[..., 0] + 1) / 2 * size) / width * 2 - 1
    gy = (top + (grid[..., 1] + 1) / 2 * size) / height * 2 - 1
    canvas_grid = torch.stack([gx, gy], dim=-1)
    truth = F.grid_sample(
        canvas.expand(len(flow), -1, -1, -1), canvas_grid, mode="bilinear", align_corners=False
    )
    strip = outside(grid)[:, 0] * (1 - outside(canvas_grid)[:, 0])
    strip[0] = 0
    return torch.from_numpy(to_uint8(truth)), strip.bool()


def star_field(size: int, seed: int = 0) -> Frames:
    """A dark, sparse image: a few hundred stars of one to three pixels on black."""
    rng = np.random.default_rng(seed)
    image = np.zeros((size, size, 3), dtype=np.uint8)
    for _ in range(size):
        y, x = rng.integers(0, size - 2, size=2)
        radius = int(rng.integers(1, 3))
        image[y : y + radius, x : x + radius] = rng.integers(120, 256, size=3)
    return image


def run_photo_eval(
    pipe: AnimationPipeline, out: Path, settings: PhotoEvalSettings
) -> dict[str, Any]:
    """Evaluate; write ``photos.json``, ``photos.txt`` and a contact sheet per size."""
    out.mkdir(parents=True, exist_ok=True)
    motions = [m for m in Motion if m is not Motion.STATIC]
    results: dict[int, SizeResult] = {size: SizeResult() for size in settings.sizes}
    photos = {name: photo_uint8(name) for name in settings.photos}
    total = len(settings.sizes) * len(photos) * len(motions) * len(settings.speeds)
    with tqdm(total=total, desc="eval photos", unit="clip") as bar:
        for size in settings.sizes:
            result = results[size]
            started = time.perf_counter()
            sheet: list[Frames] = []
            for index, (name, photo) in enumerate(photos.items()):
                image, canvas, where = scene(photo, size)
                small = downsample(image, *working_size(size, size))
                worst = 99.0
                for number, (motion, speed) in enumerate(
                    (m, s) for m in motions for s in settings.speeds
                ):
                    prompt = prompt_for(motion, speed, index + number, number)
                    params = GenerationParams(
                        prompt,
                        settings.num_frames,
                        settings.fps,
                        settings.steps,
                        settings.image_guidance_scale,
                        settings.text_guidance_scale,
                        seed=number,
                    )
                    clip = predict(pipe, small, params)
                    frames = render(image, clip)
                    worst = min(worst, frame0_psnr(frames, image))
                    family = motion.family
                    result.clips[family] += 1
                    label = classify(measured(frames, settings.classify_side))
                    result.correct[family] += int(label is motion)
                    truth, strip = strip_truth(clip, canvas, where)
                    candidates = {
                        "fill": frames,
                        "border": render(image, clip, fill=False),
                        "upscaled": upscale(to_uint8(clip.frames), size, size),
                    }
                    for method, video in candidates.items():
                        diff = torch.from_numpy(video).float() - truth.float()
                        result.strip_sq[method] += float((diff[strip] ** 2).sum()) / 3
                    result.strip_pixels += int(strip.sum())
                    if index == 0 and motion is Motion.PAN_LEFT and speed == "fast":
                        sheet += [truth.numpy(), frames, candidates["border"]]
                        sheet.append(candidates["upscaled"])
                    bar.update(1)
                result.first_frame_db[name] = round(worst, 2)
            stars = star_field(size)
            still = GenerationParams("pan left", 8, 8, 8, 1.0, 1.0)
            clip = predict(pipe, downsample(stars, *working_size(size, size)), still)
            result.first_frame_db["star_field"] = round(frame0_psnr(render(stars, clip), stars), 2)
            result.seconds = time.perf_counter() - started
            if sheet:
                _sheet(sheet, out / f"photos_{size}.png")
    report: dict[str, Any] = {
        "settings": asdict(settings),
        "results": {str(size): r.summary() for size, r in results.items()},
    }
    (out / "photos.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "photos.txt").write_text(summary(report) + "\n")
    return report


def _sheet(rows: list[Frames], path: Path) -> None:
    """Rows (truth, fill, border, upscaled) of every other frame, at half size."""
    strips = [np.concatenate(list(frames[::2, ::2, ::2]), axis=1) for frames in rows]
    Image.fromarray(np.concatenate(strips, axis=0)).save(path)


def summary(report: dict[str, Any]) -> str:
    """The report as a table with PASS/FAIL against the bars."""
    lines = []
    for size, row in report["results"].items():
        lines.append(f"{size} px ({sum(row['clips'].values())} clips, {row['seconds']}s)")
        for family, accuracy in row["motion_accuracy"].items():
            bar = FAMILY_BARS[family]
            verdict = "PASS" if accuracy >= bar else "FAIL"
            lines.append(f"  motion {family:<7} {accuracy:>7.1%}  bar >= {bar:.0%}  {verdict}")
        first = row["first_frame_psnr_db"]
        worst = min(first.values())
        verdict = "PASS" if worst >= FIRST_FRAME_BAR_DB else "FAIL"
        lines.append(f"  first frame: worst {worst:.1f} dB over {len(first)} images  {verdict}")
        strip = row["strip_psnr_db"]
        beats = strip["fill"] > max(strip["border"], strip["upscaled"])
        lines.append(
            f"  strip PSNR: fill {strip['fill']:.2f} dB, border {strip['border']:.2f} dB, "
            f"upscaled {strip['upscaled']:.2f} dB ({row['strip_pixels']} px)  "
            f"{'PASS' if beats else 'FAIL'}"
        )
    return "\n".join(lines)
