"""``animfleet eval --fill``: the fill (:func:`workers.model.imaging.fill.fill_unknown`) against a
photograph's real surroundings, beside border replication and OpenCV's Telea inpainting.

Each photograph's centred square (its short side, native pixels) is the truth; a mask hides
part of it and each method fills that part from the rest:

* pan: a strip of 1/8 of the side entering from the left, right, top or bottom;
* zoom: a ring of 1/8 of the side on every edge (a zoom out by 4/3);
* holes: three blob-shaped masks inside the picture (thresholded smooth noise, seeded), as
  the motion of a painted region opens them.

Scores are over the hidden pixels: PSNR (pooled over a photograph's masks of one kind) and
SSIM (skimage's 7x7 map, averaged there). The bars: mean PSNR at least 0.5 dB above both
baselines, above border replication on every photograph, mean SSIM above both, and no filled
value outside the photograph's own range in any channel.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from tools.training.data.photos import photo_uint8
from tools.training.evaluation.photo_eval import EVAL_PHOTOS
from workers.model.imaging.fill import fill_unknown, nearest_known

Pixels = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]
__all__ = ["EVAL_PHOTOS", "run_fill_eval", "summary"]
KINDS = ("pan", "zoom", "holes")
METHODS = ("fill", "border", "telea")
MARGIN_DB = 0.5
TELEA_RADIUS = 3  # OpenCV's documented example radius


def square(photo: Pixels) -> Pixels:
    """The photograph's centred square, its side a multiple of 8."""
    height, width = photo.shape[:2]
    side = min(height, width) // 8 * 8
    top, left = (height - side) // 2, (width - side) // 2
    return np.ascontiguousarray(photo[top : top + side, left : left + side])


def masks(side: int, seed: int) -> Iterator[tuple[str, Mask]]:
    """(kind, unknown) pairs for a square of ``side`` pixels."""
    strip = side // 8
    for where in (np.s_[:, :strip], np.s_[:, -strip:], np.s_[:strip, :], np.s_[-strip:, :]):
        unknown = np.zeros((side, side), dtype=bool)
        unknown[where] = True
        yield "pan", unknown
    ring = np.ones((side, side), dtype=bool)
    ring[strip:-strip, strip:-strip] = False
    yield "zoom", ring
    generator = torch.Generator().manual_seed(seed)
    for _ in range(3):
        yield "holes", _blob(side, strip, generator)


def _blob(side: int, margin: int, generator: torch.Generator) -> Mask:
    """Smooth noise thresholded to a few blobs covering about 2% of the square, off the
    edges by ``margin``."""
    coarse = torch.randn(1, 1, 12, 12, generator=generator)
    noise = torch.nn.functional.interpolate(coarse, size=(side, side), mode="bicubic")[0, 0]
    inner = noise[margin:-margin, margin:-margin]
    threshold = torch.quantile(inner.flatten()[::7], 0.97)
    unknown = np.zeros((side, side), dtype=bool)
    unknown[margin:-margin, margin:-margin] = (inner > threshold).numpy()
    return unknown


def border(image: Pixels, known: Mask) -> Pixels:
    """Each unknown pixel its nearest known pixel (a warp's border replication, for strips)."""
    rows, cols = nearest_known(torch.from_numpy(known))
    return np.ascontiguousarray(image[rows.numpy(), cols.numpy()])


def telea(image: Pixels, known: Mask) -> Pixels:
    import cv2

    out = cv2.inpaint(image, (~known).astype(np.uint8), TELEA_RADIUS, cv2.INPAINT_TELEA)
    return np.asarray(out, dtype=np.uint8)


FILLERS: dict[str, Callable[[Pixels, Mask], Pixels]] = {
    "fill": fill_unknown,
    "border": border,
    "telea": telea,
}


def ssim_map(a: Pixels, b: Pixels) -> npt.NDArray[np.float64]:
    from skimage.metrics import structural_similarity

    _, full = structural_similarity(  # type: ignore[no-untyped-call]
        a, b, channel_axis=2, full=True, data_range=255
    )
    out: npt.NDArray[np.float64] = full.mean(axis=2)
    return out


def _psnr(mse: float) -> float:
    return 99.0 if mse <= 0 else 10 * math.log10(255.0**2 / mse)


def run_fill_eval(out: Path, photos: tuple[str, ...] = EVAL_PHOTOS) -> dict[str, Any]:
    """Score every method on every photograph; write ``fill.json`` and ``fill.txt``."""
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, dict[str, dict[str, float]]]] = {k: {} for k in KINDS}
    outside_range = 0
    for index, name in enumerate(photos):
        truth = square(photo_uint8(name))
        low, high = truth.reshape(-1, 3).min(axis=0), truth.reshape(-1, 3).max(axis=0)
        sums: dict[str, dict[str, list[float]]] = {}
        for kind, unknown in masks(truth.shape[0], seed=index):
            for method, filler in FILLERS.items():
                filled = filler(truth, ~unknown)
                hidden = filled[unknown].astype(np.float64)
                error = float(((hidden - truth[unknown]) ** 2).sum())
                pasted = np.where(unknown[..., None], filled, truth)
                ssim = float(ssim_map(pasted, truth)[unknown].mean())
                entry = sums.setdefault(kind, {}).setdefault(method, [0.0, 0.0, 0.0, 0.0])
                entry[0] += error
                entry[1] += hidden.size
                entry[2] += ssim
                entry[3] += 1
                if method == "fill":
                    outside_range += int(((hidden < low) | (hidden > high)).sum())
        for kind, methods in sums.items():
            rows[kind][name] = {
                method: {"psnr": round(_psnr(e[0] / e[1]), 3), "ssim": round(e[2] / e[3], 4)}
                for method, e in methods.items()
            }
    report: dict[str, Any] = {"photos": list(photos), "kinds": rows}
    report["fill_values_outside_photo_range"] = outside_range
    (out / "fill.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "fill.txt").write_text(summary(report) + "\n")
    return report


def summary(report: dict[str, Any]) -> str:
    """Per photograph and kind, PSNR / SSIM of each method; means; PASS/FAIL per bar."""
    lines = []
    verdicts = []
    for kind, photos in report["kinds"].items():
        lines.append(f"{kind}: PSNR dB / SSIM over the hidden pixels")
        lines.append(f"  {'photo':<14}" + "".join(f"{m:>17}" for m in METHODS))
        for name, methods in photos.items():
            cells = "".join(
                f"{methods[m]['psnr']:>10.2f} {methods[m]['ssim']:.4f}" for m in METHODS
            )
            lines.append(f"  {name:<14}{cells}")
        mean = {
            m: {
                metric: float(np.mean([row[m][metric] for row in photos.values()]))
                for metric in ("psnr", "ssim")
            }
            for m in METHODS
        }
        cells = "".join(f"{mean[m]['psnr']:>10.2f} {mean[m]['ssim']:.4f}" for m in METHODS)
        lines.append(f"  {'mean':<14}{cells}")
        for base in ("border", "telea"):
            gain = mean["fill"]["psnr"] - mean[base]["psnr"]
            ok = gain >= MARGIN_DB
            verdicts.append(ok)
            lines.append(
                f"  {'PASS' if ok else 'FAIL'}  mean PSNR {gain:+.2f} dB over {base} "
                f"(bar >= +{MARGIN_DB} dB)"
            )
        worst = min(row["fill"]["psnr"] - row["border"]["psnr"] for row in photos.values())
        verdicts.append(worst > 0)
        lines.append(
            f"  {'PASS' if worst > 0 else 'FAIL'}  beats border on every photograph "
            f"(smallest gain {worst:+.2f} dB)"
        )
        ssim_ok = mean["fill"]["ssim"] > max(mean["border"]["ssim"], mean["telea"]["ssim"])
        verdicts.append(ssim_ok)
        lines.append(
            f"  {'PASS' if ssim_ok else 'FAIL'}  mean SSIM {mean['fill']['ssim']:.4f} > border "
            f"{mean['border']['ssim']:.4f} and Telea {mean['telea']['ssim']:.4f}"
        )
    outside = report["fill_values_outside_photo_range"]
    verdicts.append(outside == 0)
    lines.append(
        f"{'PASS' if outside == 0 else 'FAIL'}  filled values outside the photograph's own "
        f"channel range: {outside}"
    )
    lines.append(f"overall: {'PASS' if all(verdicts) else 'FAIL'}")
    return "\n".join(lines)
