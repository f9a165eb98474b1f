"""Motion-brush regions as Eulerian motion fields (Holynski et al., "Animating Pictures with
Eulerian Motion Fields", CVPR 2021).

Each region of a job (:mod:`animfleet.brush`) becomes a field over the frame, weighted by a
soft, content-aware alpha: the region's mask guided-filtered on the photograph's luminance
(so its edge follows the picture's edges), exactly 0 a filter radius outside the mask (so
everything outside every region keeps still) and exactly 1 well inside it.

- ``flow`` and ``drift`` move their content at a static velocity (pixels per frame): along
  the stroke's local tangent, or its overall direction, at full speed up to the region's
  edge. The moving content is drawn over the still picture by the soft alpha, from two layers
  that take content only from inside the region (:mod:`~workers.model.imaging.brush_layers`):
  nothing beyond a region's mask is drawn into it, and content leaving it passes under the
  soft edge instead of piling up against it.
- ``sway``, ``ripple`` and ``pulse`` add a displacement periodic over the clip: ``sway`` and
  ``pulse`` a triangle wave (out, back through rest, the other way, back: the same distance
  every frame, so no frame pair of the loop, the last to the first included, jumps further
  than another), ``ripple`` a travelling wave ``sin(wt - kr) + sin(kr)`` with
  ``w = 2 pi / frames``. Each is zero at frame 0 and at frame ``frames``, which is therefore
  frame 0 again.
- Frame ``frames`` of the flowing layers is frame 0 again too, so with ``loop`` the last
  frame leads into the first as any frame leads into the next.

Fields live in grid_sample units (-1..1 across the frame) on a grid of at most
:data:`FIELD_SIDE` px, so they are sampled at any point of any output size and composed with
the model's own (camera) flow: the renderer first follows the camera's grid, then the brush's
displacement at the point it landed on (:meth:`BrushPlan.sample`). Frame 0 is the input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from animfleet.brush import RegionUse, region_speed
from animfleet.masks import THRESHOLD, decode_mask
from workers.model.imaging.brush_layers import FlowLayers, identity, source_margin

# The long side fields are computed at: they are smooth (upsampled when sampled), and their
# cost (the soft edge's filters, integrating the flow) grows with their area.
FIELD_SIDE = 256
TANGENT_SIDE = 64  # the long side the stroke's tangents are blended at
DEFAULT_AMPLITUDE = 0.02  # of the short side, for sway, ripple and pulse without amplitude
GUIDE_EPS = 0.01  # guided filter regulariser (luminance in 0..1)


def field_size(height: int, width: int) -> tuple[int, int]:
    """(h, w) of the fields for a (height, width) frame: the frame itself up to
    :data:`FIELD_SIDE`, else its aspect ratio scaled down to it."""
    scale = min(1.0, FIELD_SIDE / max(height, width))
    return max(1, round(height * scale)), max(1, round(width * scale))


def feather_radius(height: int, width: int) -> int:
    """The guided filter's radius in output pixels: the width of a region's soft edge."""
    return max(1, round(min(height, width) / 96))


def _box(x: torch.Tensor, radius: int) -> torch.Tensor:
    """Mean over a (2 radius + 1)-square window, clipped at the border; separably (a clipped
    window's sum and size are both products of the two axes')."""
    size = 2 * radius + 1
    rows = F.avg_pool2d(x, (1, size), stride=1, padding=(0, radius), count_include_pad=False)
    return F.avg_pool2d(rows, (size, 1), stride=1, padding=(radius, 0), count_include_pad=False)


def _grow(x: torch.Tensor, radius: int) -> torch.Tensor:
    """Maximum over a (2 radius + 1)-square window, separably."""
    size = 2 * radius + 1
    rows = F.max_pool2d(x, (1, size), stride=1, padding=(0, radius))
    return F.max_pool2d(rows, (size, 1), stride=1, padding=(radius, 0))


def soft_alpha(inside: torch.Tensor, guide: torch.Tensor, radius: int) -> torch.Tensor:
    """(1, 1, h, w) in 0..1: the binary mask ``inside`` guided-filtered (He et al.) on the
    luminance ``guide``, kept to the mask grown by ``2 radius``: exactly 0 beyond, exactly 1
    where a ``2 radius`` window lies inside the mask."""
    mean_i, mean_p = _box(guide, radius), _box(inside, radius)
    cov = _box(guide * inside, radius) - mean_i * mean_p
    var = _box(guide * guide, radius) - mean_i * mean_i
    a = cov / (var + GUIDE_EPS)
    b = mean_p - a * mean_i
    q = _box(a, radius) * guide + _box(b, radius)
    grown, core = _grow(inside, 2 * radius), -_grow(-inside, 2 * radius)
    alpha = torch.where(core > 0.5, torch.ones_like(q), q.clamp(0, 1) * grown)
    return torch.where(alpha < 1e-3, torch.zeros_like(alpha), alpha)


def _stroke_px(region: RegionUse, width: int, height: int) -> npt.NDArray[np.float64]:
    points = np.asarray(region.stroke or ((0.0, 0.5), (1.0, 0.5)), dtype=np.float64)
    scaled: npt.NDArray[np.float64] = points * np.array([width, height])
    return scaled


def _unit(vector: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norm = float(np.hypot(*vector))
    return vector / norm if norm > 1e-9 else np.array([1.0, 0.0])


def chord(region: RegionUse, width: int, height: int) -> npt.NDArray[np.float64]:
    """The stroke's overall direction (unit, output pixels): its last point minus its first,
    or its longest segment's when it ends where it began."""
    points = _stroke_px(region, width, height)
    overall = points[-1] - points[0]
    if np.hypot(*overall) < 1e-6:
        segments = np.diff(points, axis=0)
        overall = segments[int(np.argmax(np.hypot(segments[:, 0], segments[:, 1])))]
    return _unit(overall)


def tangents(region: RegionUse, height: int, width: int) -> torch.Tensor:
    """(2, h, w) unit directions in output pixels at the tangent grid: each point takes the
    stroke's local tangent, blended over the stroke's nearby points (softmin of distance)."""
    points = _stroke_px(region, width, height)
    lengths = np.hypot(*np.diff(points, axis=0).T)
    keep = np.concatenate([[True], lengths > 1e-9])
    points = points[keep]
    if len(points) < 2:
        direction = chord(region, width, height)
        return torch.tensor(direction, dtype=torch.float32)[:, None, None].expand(2, 1, 1)
    along = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(points, axis=0).T))])
    samples = np.linspace(0, along[-1], 128)
    dense = np.stack([np.interp(samples, along, points[:, i]) for i in (0, 1)], axis=1)
    tangent = np.gradient(dense, axis=0)
    tangent /= np.maximum(np.hypot(tangent[:, 0], tangent[:, 1]), 1e-9)[:, None]
    h, w = _scaled(height, width, TANGENT_SIDE)
    ys = (np.arange(h) + 0.5) * height / h
    xs = (np.arange(w) + 0.5) * width / w
    grid = np.stack(np.meshgrid(xs, ys), axis=-1).reshape(-1, 2)
    distance = np.hypot(*(grid[:, None, :] - dense[None, :, :]).transpose(2, 0, 1))
    tau = 0.05 * min(height, width)
    weight = np.exp(-(distance - distance.min(axis=1, keepdims=True)) / tau)
    blended = weight @ tangent
    blended /= np.maximum(np.hypot(blended[:, 0], blended[:, 1]), 1e-9)[:, None]
    return torch.from_numpy(blended.T.reshape(2, h, w).astype(np.float32))


def _scaled(height: int, width: int, side: int) -> tuple[int, int]:
    scale = min(1.0, side / max(height, width))
    return max(1, round(height * scale)), max(1, round(width * scale))


@dataclass(frozen=True)
class BrushMotion:
    """A job's brushed motion at one output size, in grid_sample units on the field grid: the
    flowing regions' full-speed ``velocity`` (2, h, w) per frame, their soft weight
    ``flow_alpha`` (h, w) and the pixels their content may come from, ``core`` (h, w); the
    periodic displacement's ``swing`` (triangle wave), ``sine`` and ``cosine`` parts
    (2, h, w), already weighted by their regions' soft alpha."""

    velocity: torch.Tensor
    flow_alpha: torch.Tensor
    core: torch.Tensor
    swing: torch.Tensor
    sine: torch.Tensor
    cosine: torch.Tensor
    frames: int
    loop: bool

    @property
    def flows(self) -> bool:
        return bool(self.velocity.abs().amax() > 0)

    @property
    def waves(self) -> bool:
        return any(bool(part.abs().amax() > 0) for part in (self.swing, self.sine, self.cosine))

    @property
    def nbytes(self) -> int:
        return sum(t.element_size() * t.numel() for t in self._tensors())

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return self.velocity, self.flow_alpha, self.core, self.swing, self.sine, self.cosine

    def periodic(self, t: int) -> torch.Tensor:
        """(2, h, w): the periodic displacement at frame ``t``."""
        if not self.waves:
            return torch.zeros_like(self.velocity)
        share = (t % self.frames) / self.frames
        triangle = 4 * share if share <= 0.25 else 2 - 4 * share if share <= 0.75 else 4 * share - 4
        phase = 2 * math.pi * share
        wave = self.sine * math.sin(phase) + self.cosine * (1 - math.cos(phase))
        return wave + self.swing * triangle

    def plan(self) -> BrushPlan:
        """The job's flowing layers: the field integrated once over the clip, both ways."""
        if not self.flows:
            return BrushPlan(self, None)
        core = self.core[None, None]
        layers = FlowLayers.plan(self.velocity, core, self.flow_alpha, self.frames)
        return BrushPlan(self, layers)


@dataclass(frozen=True)
class BrushPlan:
    """A :class:`BrushMotion` with its flowing regions' layers (None when nothing flows)."""

    motion: BrushMotion
    flow: FlowLayers | None

    @property
    def nbytes(self) -> int:
        return self.motion.nbytes + (self.flow.nbytes if self.flow is not None else 0)

    def layers(self, t: int) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """Frame ``t`` as (weight (1, h, w), or None for everywhere, displacement (2, h, w))
        layers: a pixel at x shows the input at ``x - displacement(x)``, the layers' pixels
        summed by weight. The still picture (moved by the periodic kinds) lies under the
        flowing regions' layers, which cover it by their soft alpha."""
        wave = self.motion.periodic(t)
        if self.flow is None:
            return [(None, wave)]
        out: list[tuple[torch.Tensor | None, torch.Tensor]] = [((1 - self.flow.alpha)[None], wave)]
        return out + [(weight, shift + wave) for weight, shift in self.flow.at(t)]

    def sample(self, image: torch.Tensor, grid: torch.Tensor, first: int) -> torch.Tensor:
        """Frames ``first``.. of ``image`` (1, C, H, W) along ``grid`` (n, H, W, 2, the
        camera's sampling grid of each frame) with the brush's motion composed: each point
        the camera samples is displaced by the brush's field there."""
        frames = []
        for index in range(grid.shape[0]):
            point = grid[index : index + 1]
            out: torch.Tensor | None = None
            for weight, shift in self.layers(first + index):
                field = shift if weight is None else torch.cat([weight, shift])
                at = F.grid_sample(field[None], point, mode="bilinear", align_corners=False)
                moved = point - at[:, -2:].permute(0, 2, 3, 1)
                warped = F.grid_sample(
                    image, moved, mode="bicubic", padding_mode="border", align_corners=False
                )
                if weight is not None:
                    warped = warped * at[:, :1]
                out = warped if out is None else out + warped
            assert out is not None
            frames.append(out)
        return torch.cat(frames)


def region_mask(data: bytes, height: int, width: int) -> torch.Tensor:
    """(1, 1, h, w) 0/1: a region's mask PNG fitted like the image (centre crop), at (h, w)."""
    fitted = ImageOps.fit(decode_mask(data), (width, height), Image.Resampling.BILINEAR)
    inside = np.asarray(fitted, dtype=np.uint8) >= THRESHOLD
    return torch.from_numpy(inside.astype(np.float32))[None, None]


def build_motion(
    frame: npt.NDArray[np.uint8],
    regions: Sequence[tuple[RegionUse, bytes]],
    frames: int,
    loop: bool,
) -> BrushMotion:
    """The brushed motion of a job whose fitted frame is ``frame`` (H, W, 3): each region (its
    use and its mask PNG) at ``frames`` frames. Raises ValueError for a region whose mask
    covers nothing at this size."""
    height, width = frame.shape[:2]
    h, w = field_size(height, width)
    small = np.asarray(Image.fromarray(frame).resize((w, h), Image.Resampling.BILINEAR))
    guide = torch.from_numpy(small.astype(np.float32) @ np.array([0.299, 0.587, 0.114]) / 255)
    guide = guide.float()[None, None]
    radius = max(1, round(feather_radius(height, width) * w / width))
    # Output pixels to grid_sample units, per axis.
    units = torch.tensor([2 / width, 2 / height])[:, None, None]
    margin = source_margin(h, w)
    # Flowing regions: their velocities summed by soft weight (normalised below, so the field
    # keeps its speed under the soft edge), their weight and the pixels they may show.
    carried, weights = torch.zeros(2, h, w), torch.zeros(h, w)
    flow_alpha, core = torch.zeros(h, w), torch.zeros(h, w)
    swing, sine, cosine = torch.zeros(2, h, w), torch.zeros(2, h, w), torch.zeros(2, h, w)
    ys = (torch.arange(h, dtype=torch.float32) + 0.5) * height / h
    xs = (torch.arange(w, dtype=torch.float32) + 0.5) * width / w
    py, px = torch.meshgrid(ys, xs, indexing="ij")
    for index, (use, mask) in enumerate(regions):
        inside = region_mask(mask, h, w)
        if not bool(inside.any()):
            raise ValueError(f"regions.{index}.mask covers no pixel at {width}x{height}")
        alpha = soft_alpha(inside, guide, radius)[0, 0]
        amplitude = use.amplitude or DEFAULT_AMPLITUDE * min(height, width)
        weight = inside[0, 0]
        cx, cy = (
            float((px * weight).sum() / weight.sum()),
            float((py * weight).sum() / weight.sum()),
        )
        if use.kind in ("flow", "drift"):
            speed = region_speed(use, width, height, frames)
            if use.kind == "flow":
                direction = F.interpolate(
                    tangents(use, height, width)[None], size=(h, w), mode="bilinear"
                )[0]
                direction = direction / direction.norm(dim=0, keepdim=True).clamp_min(1e-6)
            else:
                direction = torch.tensor(chord(use, width, height), dtype=torch.float32)
                direction = direction[:, None, None].expand(2, h, w)
            carried += direction * speed * alpha * units
            weights += alpha
            flow_alpha = torch.maximum(flow_alpha, alpha)
            core = torch.maximum(core, -_grow(-inside, margin)[0, 0])
        elif use.kind == "sway":
            across = chord(use, width, height) @ np.array([[0.0, 1.0], [-1.0, 0.0]])
            swing += (
                torch.tensor(across, dtype=torch.float32)[:, None, None] * amplitude * alpha * units
            )
        else:
            if use.kind == "ripple" and use.stroke:
                cx, cy = use.stroke[0][0] * width, use.stroke[0][1] * height
            dx, dy = px - cx, py - cy
            radial = torch.sqrt(dx * dx + dy * dy)
            if use.kind == "pulse":
                spread = float(torch.sqrt((radial * radial * weight).sum() / weight.sum()))
                scale = amplitude / max(spread, 1.0)
                swing += torch.stack([dx, dy]) * scale * alpha * units
            else:
                outward = torch.stack([dx, dy]) / radial.clamp_min(1e-6)
                wavelength = max(8.0, 0.1 * min(height, width))
                phase = 2 * math.pi * radial / wavelength
                sine += outward * torch.cos(phase) * amplitude * alpha * units
                cosine += outward * torch.sin(phase) * amplitude * alpha * units
    velocity = carried / weights.clamp_min(1e-6)
    return BrushMotion(velocity, flow_alpha, core, swing, sine, cosine, frames, loop)


def brush_frames(image: npt.NDArray[np.uint8], motion: BrushMotion) -> npt.NDArray[np.uint8]:
    """Frames (F, H, W, 3) of ``image`` moved by ``motion`` alone (a still camera); frame 0 is
    ``image`` itself."""
    height, width = image.shape[:2]
    full = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    base = identity(height, width)
    plan = motion.plan()
    out = np.empty((motion.frames, height, width, 3), dtype=np.uint8)
    out[0] = image
    for t in range(1, motion.frames):
        frame = plan.sample(full, base, t)
        out[t] = frame[0].clamp(0, 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return out
