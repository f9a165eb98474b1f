"""Measure and classify the global motion of a clip.

For each frame, a Gauss-Newton (Lucas-Kanade) fit of a similarity transform — shift, log-scale,
angle, in the conventions of :mod:`tools.training.data.motions` — that maps frame 0 onto it,
started from the previous frame's estimate so motions larger than the gradient support are
followed. The trajectory is then scored against every prompt motion and ``static``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tools.training.data.motions import (
    OSCILLATION_AMPLITUDE,
    PAN_PER_FRAME,
    ROTATE_PER_FRAME,
    SPEEDS,
    ZOOM_PER_FRAME,
    Motion,
)

ITERATIONS = 12
# A motion scores 1.0 when it is as large as the slowest prompted speed; below this it is static.
STATIC_BELOW = 0.35


@dataclass(frozen=True)
class Trajectory:
    """Per-frame similarity parameters relative to frame 0, each (F,)."""

    shift_x: torch.Tensor
    shift_y: torch.Tensor
    log_scale: torch.Tensor
    angle: torch.Tensor
    residual: torch.Tensor  # mean |frame_f(warp(p)) - frame_0(p)| on [0, 1] intensities


def _gray(video: torch.Tensor) -> torch.Tensor:
    gray = video.float().mean(dim=1, keepdim=True)  # (F, 1, H, W)
    kernel = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16  # slight blur: smoother gradients
    gray = F.conv2d(F.pad(gray, (2, 2, 0, 0), mode="replicate"), kernel.view(1, 1, 1, 5))
    return F.conv2d(F.pad(gray, (0, 0, 2, 2), mode="replicate"), kernel.view(1, 1, 5, 1))


def _grid(height: int, width: int) -> torch.Tensor:
    ys = (torch.arange(height, dtype=torch.float32) + 0.5) / height * 2 - 1
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) / width * 2 - 1
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([gx, gy], dim=-1)  # (H, W, 2)


def estimate(video: torch.Tensor, region: torch.Tensor | None = None) -> Trajectory:
    """Similarity trajectory of a clip (F, 3, H, W) in [-1, 1] (or (F, H, W, 3) uint8).

    ``region`` (H, W bool): fit only the pixels inside it whose moved position is inside it
    too, e.g. the animated part of a masked clip (the rest stays still)."""
    if video.dtype == torch.uint8:
        video = video.permute(0, 3, 1, 2).float() / 127.5 - 1
    gray = (_gray(video) + 1) / 2
    frames, _, height, width = gray.shape
    points = _grid(height, width)
    # Image gradients per normalised unit (the frame spans 2 units).
    grad_x = torch.gradient(gray, dim=3)[0] * width / 2
    grad_y = torch.gradient(gray, dim=2)[0] * height / 2
    stacked = torch.cat([gray, grad_x, grad_y], dim=1)
    params = torch.zeros(4)  # shift_x, shift_y, log_scale, angle
    out = torch.zeros(frames, 4)
    residuals = torch.zeros(frames)
    for f in range(1, frames):
        for _ in range(ITERATIONS):
            residual, valid, jacobian = _linearise(stacked[f], gray[0, 0], points, params, region)
            rows = jacobian[valid]
            if rows.shape[0] < 16:
                break
            hessian = rows.T @ rows + 1e-4 * torch.eye(4)
            delta = torch.linalg.solve(hessian, -rows.T @ residual[valid])
            params = params + delta
            if delta.abs().max() < 1e-4:
                break
        residual, valid, _ = _linearise(stacked[f], gray[0, 0], points, params, region)
        residuals[f] = residual[valid].abs().mean() if valid.any() else 1.0
        out[f] = params
    return Trajectory(out[:, 0], out[:, 1], out[:, 2], out[:, 3], residuals)


def _linearise(
    frame: torch.Tensor,
    reference: torch.Tensor,
    points: torch.Tensor,
    params: torch.Tensor,
    region: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Residual, validity mask and Jacobian of frame(w(p)) - reference(p) at ``params``."""
    tx, ty, zoom, angle = params.tolist()
    scale = torch.exp(torch.tensor(zoom))
    cos, sin = torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))
    x, y = points[..., 0], points[..., 1]
    rx, ry = scale * (cos * x - sin * y), scale * (sin * x + cos * y)
    warped = torch.stack([rx + tx, ry + ty], dim=-1)
    sampled = F.grid_sample(
        frame[None], warped[None], mode="bilinear", padding_mode="border", align_corners=False
    )[0]
    value, gx, gy = sampled[0], sampled[1], sampled[2]
    # Stay a pixel inside the frame: outside it the border padding has no real gradient.
    margin = 1 - 2.0 / min(frame.shape[-2:])
    valid = (warped.abs() < margin).all(dim=-1)
    if region is not None:
        inside = region.float()[None, None]
        moved = F.grid_sample(inside, warped[None], mode="nearest", align_corners=False)[0, 0]
        valid &= region & (moved > 0.5)
    jacobian = torch.stack([gx, gy, gx * rx + gy * ry, -gx * ry + gy * rx], dim=-1)
    return (value - reference).flatten(), valid.flatten(), jacobian.reshape(-1, 4)


def scores(trajectory: Trajectory) -> dict[Motion, float]:
    """How strongly the clip shows each motion, 1.0 = the slowest prompted speed."""
    slow = SPEEDS["slow"]
    frames = trajectory.shift_x.shape[0]
    span = frames - 1
    tx, ty = trajectory.shift_x, trajectory.shift_y
    pan = PAN_PER_FRAME * slow * span
    zoom = ZOOM_PER_FRAME * slow * span
    rotate = ROTATE_PER_FRAME * slow * span
    swing = OSCILLATION_AMPLITUDE * slow
    final_x, final_y = float(tx[-1]), float(ty[-1])
    # Oscillations: out and back, so the peak excursion exceeds the net displacement.
    sway = float(torch.maximum(tx.max() - tx.clamp(min=0)[-1], -tx.min() + tx.clamp(max=0)[-1]))
    bounce = float((-ty).max()) - abs(final_y)
    zoom_final = float(trajectory.log_scale[-1])
    angle_final = float(trajectory.angle[-1])
    return {
        Motion.PAN_LEFT: final_x / pan,
        Motion.PAN_RIGHT: -final_x / pan,
        Motion.PAN_UP: final_y / pan,
        Motion.PAN_DOWN: -final_y / pan,
        Motion.ZOOM_IN: zoom_final / zoom,
        Motion.ZOOM_OUT: -zoom_final / zoom,
        Motion.ROTATE_CW: angle_final / rotate,
        Motion.ROTATE_CCW: -angle_final / rotate,
        Motion.BOUNCE: bounce / swing,
        Motion.SWAY: (sway - abs(final_x)) / swing,
    }


def classify(video: torch.Tensor) -> Motion:
    """The motion a clip shows most strongly, or ``static`` if none reaches the threshold."""
    ranked = scores(estimate(video))
    best = max(ranked, key=lambda motion: ranked[motion])
    return best if ranked[best] >= STATIC_BELOW else Motion.STATIC


def _reversals(series: torch.Tensor, tolerance: float) -> int:
    """How often a trajectory turns back, ignoring steps smaller than ``tolerance``."""
    steps = [float(d) for d in series.diff() if abs(float(d)) >= tolerance]
    return sum(1 for a, b in itertools.pairwise(steps) if a * b < 0)


def addon_scores(trajectory: Trajectory) -> dict[str, float]:
    """How strongly the clip shows each add-on motion, 2.0 = the add-on's trained size.

    Every add-on motion returns home, so each score is an excursion minus the net
    displacement: pans, zooms and rotations, which end where they went, score about zero.
    """
    from tools.training.data.addon_motions import (
        ORBIT_RADIUS,
        PULSE_LOG_SCALE,
        SHAKE_AMPLITUDE,
        WOBBLE_ANGLE,
        AddonMotion,
    )

    tx, ty = trajectory.shift_x, trajectory.shift_y
    zoom, angle = trajectory.log_scale, trajectory.angle
    x_range = float(tx.max() - tx.min()) - abs(float(tx[-1]))
    y_range = float(ty.max() - ty.min()) - abs(float(ty[-1]))
    shake = x_range / SHAKE_AMPLITUDE if _reversals(tx, SHAKE_AMPLITUDE / 4) >= 3 else 0.0
    return {
        AddonMotion.SHAKE.value: shake,
        AddonMotion.PULSE.value: 4 * (float(zoom.max()) - abs(float(zoom[-1]))) / PULSE_LOG_SCALE,
        AddonMotion.ORBIT.value: min(x_range, y_range) / ORBIT_RADIUS,
        AddonMotion.WOBBLE.value: 2
        * (float(angle.abs().max()) - abs(float(angle[-1])))
        / WOBBLE_ANGLE,
    }


def classify_with_addons(video: torch.Tensor) -> str:
    """:func:`classify` over the prompt motions and the add-on motions together: the label
    (a :class:`Motion` or add-on value) the clip shows most strongly, or ``static``.

    A one-axis oscillation (sway, bounce) loses what the clip moves on the other axis, so a
    circle is not read as a sway.
    """
    trajectory = estimate(video)
    ranked: dict[str, float] = {str(m): s for m, s in scores(trajectory).items()}
    x_range = float(trajectory.shift_x.max() - trajectory.shift_x.min())
    y_range = float(trajectory.shift_y.max() - trajectory.shift_y.min())
    swing = OSCILLATION_AMPLITUDE * SPEEDS["slow"]
    ranked[Motion.SWAY.value] -= y_range / swing
    ranked[Motion.BOUNCE.value] -= x_range / swing
    ranked.update(addon_scores(trajectory))
    best = max(ranked, key=lambda label: ranked[label])
    return best if ranked[best] >= STATIC_BELOW else Motion.STATIC.value
