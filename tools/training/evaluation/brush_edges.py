"""The motion brush at its regions' edges, as a hurried person paints them: on each held-out
photograph a textured rectangle flows along one axis (the axis turns from photograph to
photograph), its mask painted 10 px over whatever borders it; 16 frames at 512 px, with and
without ``loop``, rendered by the worker's renderer (a "still" prompt's camera keeps still,
so the regions alone move), judged by OpenCV (template matching by normalised cross-correlation,
Sobel gradients), which shares no code with the renderer:

- *boundary travel*: how far the neighbour's strip under the mask (the 10 px outside the
  rectangle on its upstream side) is found moved into the region, frame by frame
  (normalised cross-correlation, a match counts at :data:`MATCH_SCORE` or better);
- *smear*: the detail (mean squared Sobel gradient) of the 30 px inside the upstream edge,
  against frame 0's, worst frame;
- *ghosting*: the detail of the whole rectangle against frame 0's, worst frame (two pictures
  blended halve it; the region's own content, carried round, keeps it);
- *leaving*: how far the content of the 20 px inside the downstream edge moves from frame to
  frame, over the requested speed (content piling up under the edge slows there);
- *seam* (loops): the last frame's difference to the first over the median consecutive one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from animfleet.brush import RegionUse
from tools.training.data.photos import photo_uint8
from tools.training.evaluation.brush_eval import (
    PHOTOS,
    SIZE,
    png,
    square,
    textured_centres,
)

FRAMES = 16
SPEED = 2.5  # px per frame, as the streaks were reported at
OVERLAP = 10  # px a hurried brush paints over the neighbour
DEPTH = 30  # px of the region next to an edge judged for smear and leaving
HALF = (100, 80)  # the rectangle's half size along and across its stream
MATCH_SCORE = 0.5
TRAVEL_BAR = 4.0
SMEAR_BAR = 0.5
GHOST_BAR = 0.8
LEAVING_BAR = 0.7
SEAM_BAR = 1.3
AXES = ((1, 0), (0, 1), (-1, 0), (0, -1))  # right, down, left, up
Pixels = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]


@dataclass
class EdgeScore:
    photo: str
    clip: str
    travel: float
    smear: float
    ghost: float
    leaving: float
    seam: float | None


@dataclass(frozen=True)
class Scene:
    """The rectangle (its slices), its stream's axis and the painted mask."""

    rows: slice
    cols: slice
    axis: tuple[int, int]
    mask: Mask


def scene(index: int, image: Pixels) -> Scene:
    """Photograph ``index``'s rectangle on its most textured window, and its mask."""
    x, y = textured_centres(image, 1, 64)[0]
    axis = AXES[index % len(AXES)]
    half_cols, half_rows = HALF if axis[0] else HALF[::-1]
    x = min(max(x, half_cols + 48), SIZE - half_cols - 48)
    y = min(max(y, half_rows + 48), SIZE - half_rows - 48)
    rows, cols = slice(y - half_rows, y + half_rows), slice(x - half_cols, x + half_cols)
    inside = np.zeros((SIZE, SIZE), dtype=np.uint8)
    inside[rows, cols] = 1
    disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * OVERLAP + 1, 2 * OVERLAP + 1))
    return Scene(rows, cols, axis, cv2.dilate(inside, disk) > 0)


def _grey(frame: Pixels) -> npt.NDArray[np.float32]:
    return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY).astype(np.float32)


def detail(frame: Pixels, where: tuple[slice, slice]) -> float:
    """Mean squared Sobel gradient over ``where``."""
    grey = _grey(frame)
    energy = cv2.Sobel(grey, cv2.CV_32F, 1, 0) ** 2 + cv2.Sobel(grey, cv2.CV_32F, 0, 1) ** 2
    return float(energy[where].mean())


def _strip(place: Scene, upstream: bool, outside: int, inside: int) -> tuple[slice, slice]:
    """Slices of the band from ``outside`` px outside to ``inside`` px inside the rectangle's
    upstream (or downstream) edge, its ends (20 px) left out."""
    dx, dy = place.axis
    sign = 1 if upstream else -1
    step = sign * (dx or dy)  # +1: the band runs along increasing columns (or rows)
    spans = (place.cols, place.rows) if dx else (place.rows, place.cols)
    edge = spans[0].start if step > 0 else spans[0].stop
    depth = (
        slice(edge - outside, edge + inside) if step > 0 else slice(edge - inside, edge + outside)
    )
    lane = slice(spans[1].start + 20, spans[1].stop - 20)
    return (lane, depth) if dx else (depth, lane)


def _found_at(
    frame: Pixels, search: tuple[slice, slice], template: npt.NDArray[np.float32], forwards: bool
) -> tuple[float, float]:
    """Where along the stream ``template`` best matches inside ``search`` (px from the
    search's upstream end, sub-pixel by a parabola through the peak) and how well
    (normalised cross-correlation)."""
    scores = cv2.matchTemplate(_grey(frame)[search], template, cv2.TM_CCOEFF_NORMED).ravel()
    best = int(np.argmax(scores))
    at = float(best)
    if 0 < best < len(scores) - 1:
        left, mid, right = scores[best - 1 : best + 2]
        bend = left - 2 * mid + right
        at += 0.5 * float(left - right) / float(bend) if bend < 0 else 0.0
    return (at if forwards else len(scores) - 1 - at), float(scores[best])


def boundary_travel(frames: Pixels, place: Scene) -> float:
    """The farthest, over the frames, the neighbour's strip under the mask (the
    :data:`OVERLAP` px outside the upstream edge) is found moved into the region, px along
    the stream; 0 when it is found nowhere further in."""
    forwards = place.axis[0] > 0 or place.axis[1] > 0
    template = _grey(frames[0])[_strip(place, True, OVERLAP, 0)]
    search = _strip(place, True, OVERLAP, 48)
    found = [_found_at(frame, search, template, forwards) for frame in frames[1:]]
    return max([float(at) for at, score in found if score >= MATCH_SCORE], default=0.0)


def leaving_speed(frames: Pixels, place: Scene) -> float:
    """How far the content of the 20 px inside the downstream edge moves from frame to frame
    along the stream (mean over the clip), over :data:`SPEED`: content that piles up under
    the edge slows there."""
    forwards = place.axis[0] > 0 or place.axis[1] > 0
    band = _strip(place, False, 0, 20)
    search = _strip(place, False, 12, 24)  # from 4 px upstream of the band to 12 px past it
    moved = []
    for t in range(1, len(frames) - 1):
        at, _ = _found_at(frames[t + 1], search, _grey(frames[t])[band], forwards)
        moved.append(at - 4)
    return float(np.mean(moved)) / SPEED


def judge(photo: str, clip: str, frames: Pixels, place: Scene, loop: bool) -> EdgeScore:
    upstream = _strip(place, True, 0, DEPTH)
    whole = (place.rows, place.cols)
    seam = None
    if loop:
        steps = [np.abs(frames[t + 1].astype(float) - frames[t]).mean() for t in range(FRAMES - 1)]
        closing = float(np.abs(frames[-1].astype(float) - frames[0]).mean())
        seam = closing / max(float(np.median(steps)), 1e-9)
    return EdgeScore(
        photo,
        clip,
        travel=boundary_travel(frames, place),
        smear=min(detail(f, upstream) for f in frames) / detail(frames[0], upstream),
        ghost=min(detail(f, whole) for f in frames) / detail(frames[0], whole),
        leaving=leaving_speed(frames, place),
        seam=seam,
    )


def run_edge_eval() -> list[EdgeScore]:
    """Every photograph's rectangle, flowing without and with ``loop``, judged."""
    from workers.model.imaging.brush import brush_frames, build_motion

    scores = []
    for index, name in enumerate(PHOTOS):
        image = square(photo_uint8(name))
        place = scene(index, image)
        dx, dy = place.axis
        stroke = ((0.5 - 0.1 * dx, 0.5 - 0.1 * dy), (0.5 + 0.1 * dx, 0.5 + 0.1 * dy))
        use = RegionUse(kind="drift", stroke=stroke, speed=SPEED)
        for loop in (False, True):
            motion = build_motion(image, [(use, png(place.mask))], FRAMES, loop)
            frames = brush_frames(image, motion)
            scores.append(judge(name, "drift loop" if loop else "drift", frames, place, loop))
    return scores


def edge_summary(scores: list[EdgeScore]) -> tuple[list[str], list[tuple[bool, str]]]:
    """The table's lines and the (passed, line) checks of the edge bars."""
    head = ("photo", "clip", "travel px", "smear x", "ghost x", "leaving x", "seam x")
    lines = ["{:<13} {:<11} {:>9} {:>8} {:>8} {:>9} {:>7}".format(*head)]
    for s in scores:
        closing = "-" if s.seam is None else f"{s.seam:.2f}"
        row = (s.photo, s.clip, s.travel, s.smear, s.ghost, s.leaving, closing)
        lines.append("{:<13} {:<11} {:>9.1f} {:>8.2f} {:>8.2f} {:>9.2f} {:>7}".format(*row))
    loops = [s for s in scores if s.seam is not None]
    travel = max(s.travel for s in scores)
    smear = min(s.smear for s in scores)
    ghost = min(s.ghost for s in loops)
    leaving = min(s.leaving for s in scores)
    seam = max(s.seam for s in loops if s.seam is not None)
    n, m = len(scores), len(loops)
    checks = [
        (travel <= TRAVEL_BAR, f"boundary travel: worst {travel:.1f} px into the region over "
         f"{n} clips of {FRAMES} frames, masks {OVERLAP} px over a neighbour "
         f"(bar <= {TRAVEL_BAR})"),
        (smear >= SMEAR_BAR, f"smear: upstream {DEPTH} px keep >= {smear:.2f}x frame 0's detail "
         f"over {n} clips (bar >= {SMEAR_BAR})"),
        (ghost >= GHOST_BAR, f"ghosting: a looped region keeps >= {ghost:.2f}x frame 0's detail "
         f"in every frame over {m} clips (bar >= {GHOST_BAR})"),
        (leaving >= LEAVING_BAR, f"leaving: content 20 px inside the downstream edge moves at "
         f">= {leaving:.2f}x the requested speed over {n} clips (bar >= {LEAVING_BAR})"),
        (seam <= SEAM_BAR, f"seam: |last-first| / median consecutive: worst {seam:.2f} over {m} "
         f"looped clips (bar <= {SEAM_BAR})"),
    ]  # fmt: skip
    return lines, checks


def edge_report(scores: list[EdgeScore]) -> list[dict[str, Any]]:
    return [asdict(s) for s in scores]
