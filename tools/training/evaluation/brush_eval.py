"""``animfleet eval --brush``: brushed regions on held-out real photographs at 512 px, scored by
OpenCV's optical flow (Farneback), which shares no code with the model or the renderer.

Photographs: scikit-image's ``coffee`` and ``rocket``, scikit-learn's ``china`` and
``flower``, matplotlib's ``grace_hopper``: held out from the shipped model's and the edge
fill's training (their cards list what training saw). Each is centre-cropped square and
resized to 512 px. Regions are generated reproducibly from the photograph's index: two
ellipses centred on the most textured windows (local gradient energy), one ``flow`` with a
straight stroke whose length gives its speed, one ``drift`` with an explicit speed; stroke
directions are drawn from a seeded generator. Every photograph runs three clips, prompt
"still", 8 frames, through the worker's own ``Animator.animate`` (the served student, its
edge fill, the renderer), frames judged before encoding:

- ``flow+drift``, ``flow+drift loop``: per region, the median optical flow over the region
  (shrunk by its soft edge, textured pixels only: flow cannot be seen on flat ones) and the
  clip's frame pairs; its angle to the stroke and its length against the requested speed;
- ``sway+ripple loop`` (periodic kinds): no single direction to judge; judged on the rest.

Every clip: mean optical-flow magnitude outside all regions (grown by :data:`MARGIN` px: the
soft edge plus Farneback's window, which smears motion that far), frame 0 against the input
(PSNR), and for loops the mean absolute difference of the last frame to the first against the
median of consecutive frames'.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image

from animfleet.brush import RegionUse, region_input, region_speed
from animfleet.jobs import JobParams
from tools.training.data.photos import photo_uint8

MODEL = Path("models/animfleet-small-distilled")  # the shipped student
PHOTOS = ("coffee", "rocket", "china", "flower", "grace_hopper")
SIZE = 512
FRAMES = 8
MARGIN = 24  # px outside a region not judged for stillness
ANGLE_BAR = 22.5
DIRECTION_SHARE_BAR = 0.95
SPEED_RANGE = (0.7, 1.4)
OUTSIDE_BAR = 0.25
FRAME0_BAR_DB = 40.0
LOOP_BAR = 1.3  # last-to-first step over the median consecutive one, every looped clip
Pixels = npt.NDArray[np.uint8]


@dataclass
class RegionScore:
    photo: str
    clip: str
    kind: str
    angle_error: float
    speed_ratio: float
    requested: float


@dataclass
class ClipScore:
    photo: str
    clip: str
    outside: float
    frame0_db: float
    loop_ratio: float | None
    seconds: float


def served_animator(model: Path = MODEL) -> Any:
    """The worker's :class:`Animator` for ``model`` as its serving file says (steps, guidance),
    eager, with its edge fill and renderer."""
    from workers.model.animator import Animator
    from workers.model.runtime.loading import Variant
    from workers.model.runtime.serving import load_serving

    serving = load_serving(model)
    variant = Variant(
        name=model.name,
        steps=serving.steps or Variant.steps,
        image_guidance_scale=serving.image_guidance_scale,
        text_guidance_scale=serving.text_guidance_scale,
    )
    return Animator(model, variant)


def square(photo: Pixels, size: int = SIZE) -> Pixels:
    height, width = photo.shape[:2]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    crop = Image.fromarray(photo[top : top + side, left : left + side])
    return np.asarray(crop.resize((size, size), Image.Resampling.LANCZOS))


def textured_centres(image: Pixels, count: int, radius: int) -> list[tuple[int, int]]:
    """Centres (x, y) of the ``count`` most textured non-overlapping windows."""
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    energy = np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
    local = cv2.blur(energy, (2 * radius + 1, 2 * radius + 1))
    edge = radius + MARGIN
    local[:edge], local[-edge:], local[:, :edge], local[:, -edge:] = 0, 0, 0, 0
    found: list[tuple[int, int]] = []
    for _ in range(count):
        y, x = np.unravel_index(int(np.argmax(local)), local.shape)
        found.append((int(x), int(y)))
        cv2.circle(local, (int(x), int(y)), 2 * radius + 2 * MARGIN, 0.0, -1)
    return found


def ellipse(centre: tuple[int, int], axes: tuple[int, int], angle: float) -> npt.NDArray[np.bool_]:
    canvas = np.zeros((SIZE, SIZE), dtype=np.uint8)
    cv2.ellipse(canvas, centre, axes, angle, 0, 360, 255, -1)
    return canvas > 0


def png(inside: npt.NDArray[np.bool_]) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(inside.astype(np.uint8) * 255).save(buffer, format="PNG")
    return buffer.getvalue()


def stroke_at(
    centre: tuple[int, int], angle: float, length: float
) -> tuple[tuple[float, float], ...]:
    """A straight stroke through ``centre`` at ``angle`` (radians), ``length`` px long."""
    dx, dy = math.cos(angle) * length / 2, math.sin(angle) * length / 2
    x, y = centre
    ends = ((x - dx) / SIZE, (y - dy) / SIZE), ((x + dx) / SIZE, (y + dy) / SIZE)
    return tuple((min(max(px, 0.0), 1.0), min(max(py, 0.0), 1.0)) for px, py in ends)


def brushed_regions(
    index: int, image: Pixels
) -> dict[str, list[tuple[RegionUse, npt.NDArray[np.bool_]]]]:
    """The photograph's clips: name -> regions (use, mask), reproducible from ``index``."""
    rng = np.random.default_rng(1000 + index)
    centres = textured_centres(image, 2, 56)
    masks = [
        ellipse(
            c, (int(rng.integers(60, 90)), int(rng.integers(50, 80))), float(rng.uniform(0, 180))
        )
        for c in centres
    ]
    angles = rng.uniform(0, 2 * math.pi, size=2)
    flow = RegionUse(
        kind="flow", stroke=stroke_at(centres[0], angles[0], float(rng.uniform(25, 55)))
    )
    drift = RegionUse(
        kind="drift",
        stroke=stroke_at(centres[1], angles[1], 60.0),
        speed=float(rng.uniform(1.0, 3.0)),
    )
    sway = RegionUse(kind="sway", stroke=flow.stroke, amplitude=float(rng.uniform(3, 8)))
    ripple = RegionUse(kind="ripple", amplitude=float(rng.uniform(2, 5)))
    pair = [(flow, masks[0]), (drift, masks[1])]
    return {
        "flow+drift": pair,
        "flow+drift loop": pair,
        "sway+ripple loop": [(sway, masks[0]), (ripple, masks[1])],
    }


def optical_flows(frames: Pixels) -> npt.NDArray[np.float32]:
    """(F-1, H, W, 2): Farneback flow of each consecutive pair (x, y in pixels)."""
    grey = [cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY) for frame in frames]
    farneback: Any = cv2.calcOpticalFlowFarneback  # its stubs want a flow array, not None
    pairs = [
        farneback(grey[t], grey[t + 1], None, 0.5, 4, 21, 5, 7, 1.5, 0)
        for t in range(len(grey) - 1)
    ]
    return np.stack(pairs).astype(np.float32)


def judge_region(
    flows: npt.NDArray[np.float32], image: Pixels, use: RegionUse, inside: npt.NDArray[np.bool_]
) -> tuple[float, float]:
    """(angle error in degrees, measured / requested speed) of one flow or drift region."""
    core = cv2.erode(inside.astype(np.uint8), np.ones((2 * 12 + 1, 2 * 12 + 1), np.uint8)) > 0
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    energy = np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
    textured = core & (energy >= np.median(energy[core]))
    vectors = flows[:, textured].reshape(-1, 2)
    measured = np.median(vectors, axis=0)
    assert use.stroke is not None
    (x0, y0), (x1, y1) = use.stroke[0], use.stroke[-1]
    wanted = np.array([x1 - x0, y1 - y0])
    cosine = float(measured @ wanted / max(np.hypot(*measured) * np.hypot(*wanted), 1e-9))
    angle = math.degrees(math.acos(max(-1.0, min(1.0, cosine))))
    requested = region_speed(use, SIZE, SIZE, FRAMES)
    return angle, float(np.hypot(*measured)) / requested


def psnr(a: Pixels, b: Pixels) -> float:
    error = float(np.mean((a.astype(float) - b.astype(float)) ** 2))
    return 10 * math.log10(255**2 / max(error, 1e-10))


def run_brush_eval(animator: Any, out: Path) -> tuple[list[RegionScore], list[ClipScore]]:
    regions_scored: list[RegionScore] = []
    clips: list[ClipScore] = []
    for index, name in enumerate(PHOTOS):
        image = square(photo_uint8(name))
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        for clip, regions in brushed_regions(index, image).items():
            params = JobParams(
                prompt="still",
                frames=FRAMES,
                fps=8,
                width=SIZE,
                height=SIZE,
                seed=index,
                regions=tuple(use for use, _ in regions),
                loop=clip.endswith("loop"),
            )
            inputs = {region_input(i): png(mask) for i, (_, mask) in enumerate(regions)}
            started = time.perf_counter()
            frames = animator.animate(buffer.getvalue(), params, inputs=inputs)
            seconds = time.perf_counter() - started
            flows = optical_flows(frames)
            union = np.zeros((SIZE, SIZE), dtype=np.uint8)
            for _, mask in regions:
                union |= mask.astype(np.uint8)
            grown = cv2.dilate(union, np.ones((2 * MARGIN + 1, 2 * MARGIN + 1), np.uint8))
            outside = float(np.hypot(flows[..., 0], flows[..., 1])[:, grown == 0].mean())
            loop_ratio = None
            if params.loop:
                steps = [
                    np.abs(frames[t + 1].astype(float) - frames[t]).mean()
                    for t in range(FRAMES - 1)
                ]
                closing = float(np.abs(frames[-1].astype(float) - frames[0]).mean())
                loop_ratio = closing / max(float(np.median(steps)), 1e-9)
            clips.append(
                ClipScore(name, clip, outside, psnr(frames[0], image), loop_ratio, seconds)
            )
            for use, mask in regions:
                if use.kind in ("flow", "drift"):
                    angle, ratio = judge_region(flows, image, use, mask)
                    requested = region_speed(use, SIZE, SIZE, FRAMES)
                    regions_scored.append(
                        RegionScore(name, clip, use.kind, angle, ratio, requested)
                    )
            if index == 0 and clip == "flow+drift loop":
                out.mkdir(parents=True, exist_ok=True)
                sheet = np.concatenate([frames[0], frames[FRAMES // 2], frames[-1]], axis=1)
                Image.fromarray(sheet).save(out / "brush_sample.png")
    out.mkdir(parents=True, exist_ok=True)
    report = {"regions": [asdict(r) for r in regions_scored], "clips": [asdict(c) for c in clips]}
    (out / "brush.json").write_text(json.dumps(report, indent=2))
    return regions_scored, clips


def summary(regions: list[RegionScore], clips: list[ClipScore]) -> tuple[str, bool]:
    """The table and the PASS/FAIL lines; whether every bar passed."""
    head = ("photo", "clip", "region", "asked px/f", "angle err", "speed x")
    lines = ["{:<13} {:<17} {:<6} {:>10} {:>9} {:>8}".format(*head)]
    for r in regions:
        row = (r.photo, r.clip, r.kind, r.requested, r.angle_error, r.speed_ratio)
        lines.append("{:<13} {:<17} {:<6} {:>10.2f} {:>8.1f}° {:>8.2f}".format(*row))
    head = ("photo", "clip", "outside px/f", "frame0 dB", "last/first", "s")
    lines += ["", "{:<13} {:<17} {:>12} {:>9} {:>10} {:>6}".format(*head)]
    for c in clips:
        loop = "-" if c.loop_ratio is None else f"{c.loop_ratio:.2f}"
        frame0 = "inf" if c.frame0_db >= 99 else f"{c.frame0_db:.1f}"
        shown = (c.photo, c.clip, c.outside, frame0, loop, c.seconds)
        lines.append("{:<13} {:<17} {:>12.3f} {:>9} {:>10} {:>6.1f}".format(*shown))
    share = sum(r.angle_error <= ANGLE_BAR for r in regions) / max(len(regions), 1)
    in_range = [SPEED_RANGE[0] <= r.speed_ratio <= SPEED_RANGE[1] for r in regions]
    ratios = [r.speed_ratio for r in regions]
    worst_outside = max(c.outside for c in clips)
    worst_frame0 = min(c.frame0_db for c in clips)
    loops = [c.loop_ratio for c in clips if c.loop_ratio is not None]
    low, high = SPEED_RANGE
    checks = [
        (
            share >= DIRECTION_SHARE_BAR,
            f"direction within {ANGLE_BAR}° of the stroke in {share:.0%} of {len(regions)} "
            f"regions (bar {DIRECTION_SHARE_BAR:.0%})",
        ),
        (
            all(in_range),
            f"speed within {low}-{high}x of the requested in {sum(in_range)}/{len(regions)} "
            f"regions (measured {min(ratios):.2f}-{max(ratios):.2f}x)",
        ),
        (
            worst_outside < OUTSIDE_BAR,
            f"outside all regions: worst clip {worst_outside:.3f} px/frame (bar < {OUTSIDE_BAR})",
        ),
        (
            worst_frame0 >= FRAME0_BAR_DB,
            f"frame 0 vs the input: worst {worst_frame0:.1f} dB (bar >= {FRAME0_BAR_DB})",
        ),
        (
            all(r <= LOOP_BAR for r in loops),
            f"loop: |last-first| / median consecutive: worst {max(loops):.2f} over "
            f"{len(loops)} clips (bar <= {LOOP_BAR})",
        ),
    ]
    lines.append("")
    lines += [f"{'PASS' if ok else 'FAIL'} {text}" for ok, text in checks]
    return "\n".join(lines), all(ok for ok, _ in checks)
