"""How brushed content flows: layers of the photograph carried along the field, each with
its own clock, drawn over the still picture by the flowing regions' soft alpha.

Layer k shows the photograph itself at its anchor frame a_k (0, N and evenly between, at most
:data:`LAYER_SPAN` frames apart) and the photograph carried along the (full-speed) field
t - a_k frames at frame t: forwards after its anchor, with time reversed before it. Each
pixel hands over from one layer to the next at its own time (per-pixel phase offsets, as in
Liao et al.'s progressive dynamism; Holynski et al. blend two integrations the same way), a
smoothstep over :func:`handover_frames` frames: early near the region's upstream edge, late
near its downstream edge, in proportion to how far along its stream the pixel lies. So

- content that flows in at the upstream edge comes from inside the region: there a pixel
  mostly shows the next layer, whose content arrives from downstream;
- a layer may only show content that starts inside the region's *source core* (the mask
  shrunk by :func:`source_margin`, more than a hurried brush strays over a neighbour): each
  pixel of a layer holds its last such source where its trajectory would leave the core, so
  nothing beyond a region's mask ever enters it;
- no frame is a global blend of two pictures (no ghost): only a band of each region is
  handing over at any time, and no content drifts more than a layer span from where it is;
- frame N shows the photograph, as frame 0 does: a loop's last step is like any other;
- content leaving at the downstream edge keeps its speed and passes under the soft edge,
  which fades it out over the still surroundings (the field is not slowed there, so nothing
  piles up against the edge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

MAX_SUBSTEP_PX = 1.0  # integration substeps move at most this many field pixels
PHASE_SIDE = 64  # the long side the handover times are planned at (they are smooth)
LAYER_SPAN = 8  # frames at most between two layers' anchors


def source_margin(height: int, width: int) -> int:
    """Field pixels a region's mask is shrunk by to give the pixels a layer may show: a 40th
    of the short side (13 px at 512), more than a hurried brush strays over a neighbour."""
    return max(1, round(min(height, width) / 40))


def handover_frames(frames: int) -> float:
    """How many frames a pixel takes to hand over from the forward layer to the backward."""
    return max(2.0, frames / 8)


def identity(height: int, width: int) -> torch.Tensor:
    """(1, h, w, 2): the grid_sample coordinates of each pixel's centre."""
    ys = (torch.arange(height, dtype=torch.float32) + 0.5) * 2 / height - 1
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) * 2 / width - 1
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([grid_x, grid_y], dim=-1)[None]


def trajectory(velocity: torch.Tensor, frames: int) -> torch.Tensor:
    """(frames + 1, 2, h, w): how far content travelled to each point in t frames of the
    static ``velocity`` field (grid_sample units): the point traced backwards along the field,
    in substeps of at most :data:`MAX_SUBSTEP_PX` field pixels."""
    shift = torch.zeros_like(velocity)
    out = [shift]
    height, width = velocity.shape[-2:]
    base = identity(height, width)
    pixels = velocity.abs().amax(dim=(1, 2)) * torch.tensor([width / 2, height / 2])
    substeps = max(1, math.ceil(float(pixels.max()) / MAX_SUBSTEP_PX))
    step = velocity[None] / substeps
    for _ in range(frames):
        for _ in range(substeps):
            back = base - shift.permute(1, 2, 0)[None]
            here = F.grid_sample(
                step, back, mode="bilinear", padding_mode="zeros", align_corners=False
            )
            shift = shift + here[0]
        out.append(shift)
    return torch.stack(out)


def _valid_frames(paths: torch.Tensor, core: torch.Tensor) -> torch.Tensor:
    """(h, w) long: the last t up to which every ``paths[t]`` of a pixel starts in ``core``
    (1, 1, h, w); 0 where the pixel itself is outside it (its layer then keeps still)."""
    height, width = core.shape[-2:]
    sources = identity(height, width) - paths.permute(0, 2, 3, 1)
    inside = F.grid_sample(
        core.expand(paths.shape[0], -1, -1, -1),
        sources,
        mode="bilinear",
        padding_mode="zeros",
        align_corners=False,
    )[:, 0]
    outside = inside <= 0.5
    outside[0] = False
    first_out = torch.where(outside.any(dim=0), outside.float().argmax(dim=0), paths.shape[0])
    return first_out - 1


def _stream_share(direction: torch.Tensor, core: torch.Tensor) -> torch.Tensor:
    """(h, w) in 0..1: how far along the stream through each pixel it lies inside ``core``:
    its distance upstream to the core's edge over the stream's whole length there."""
    height, width = core.shape[-2:]
    unit = direction / direction.norm(dim=0, keepdim=True).clamp_min(1e-6)
    step = (unit * torch.tensor([2 / width, 2 / height])[:, None, None])[None]
    base = identity(height, width)
    lengths = []
    for sign in (-1.0, 1.0):
        point, alive = base.clone(), core[0, 0] > 0.5
        travelled = torch.zeros(height, width)
        for _ in range(height + width):
            if not bool(alive.any()):
                break
            moved = F.grid_sample(step, point, mode="bilinear", align_corners=False)
            point = point + sign * moved.permute(0, 2, 3, 1)
            here = F.grid_sample(core, point, mode="bilinear", align_corners=False)[0, 0]
            alive &= here > 0.5
            travelled += alive.float()
        lengths.append(travelled)
    upstream, downstream = lengths
    return (upstream + 0.5) / (upstream + downstream + 1)


def anchors(frames: int) -> list[int]:
    """The frames the layers show the photograph itself at: 0, ``frames`` and evenly between,
    at most :data:`LAYER_SPAN` apart (a layer's content drifts only that far from where it
    is, so little of a region's texture is out of sight at any time)."""
    count = math.ceil(frames / LAYER_SPAN)
    return [round(k * frames / count) for k in range(count + 1)]


@dataclass(frozen=True)
class FlowLayers:
    """The flowing regions' layers: ``forward[t]`` and ``backward[s]`` (each
    (frames + 1, 2, h, w)) how far content travelled to each point in t frames forwards and
    s frames with time reversed, and each pixel's last such frame whose content starts in the
    core; ``share`` (h, w), how far along its stream each pixel lies (0 upstream, 1
    downstream), and ``alpha`` (h, w), the flowing regions' soft weight over the still
    picture."""

    forward: torch.Tensor
    backward: torch.Tensor
    forward_valid: torch.Tensor
    backward_valid: torch.Tensor
    share: torch.Tensor
    alpha: torch.Tensor
    frames: int

    @classmethod
    def plan(
        cls, velocity: torch.Tensor, core: torch.Tensor, alpha: torch.Tensor, frames: int
    ) -> FlowLayers:
        """The layers of the full-speed field ``velocity`` (2, h, w) of regions whose pixels
        that may be shown are ``core`` (1, 1, h, w) and whose soft weight is ``alpha``."""
        forward = trajectory(velocity, frames)
        backward = trajectory(-velocity, frames)
        height, width = velocity.shape[-2:]
        scale = min(1.0, PHASE_SIDE / max(height, width))
        small = max(1, round(height * scale)), max(1, round(width * scale))
        share = _stream_share(
            F.interpolate(velocity[None], size=small, mode="bilinear", align_corners=False)[0],
            F.interpolate(core, size=small, mode="area"),
        )
        share = F.interpolate(share[None, None], size=(height, width), mode="bilinear")[0, 0]
        return cls(
            forward,
            backward,
            _valid_frames(forward, core),
            _valid_frames(backward, core),
            share,
            alpha,
            frames,
        )

    @property
    def nbytes(self) -> int:
        parts = (self.forward, self.backward, self.forward_valid, self.backward_valid)
        return sum(t.element_size() * t.numel() for t in (*parts, self.share, self.alpha))

    def _handed_over(self, start: int, stop: int, t: int) -> torch.Tensor:
        """(h, w) 0..1: how far each pixel has handed over from the layer anchored at
        ``start`` to the one at ``stop``: a smoothstep over :func:`handover_frames` frames,
        early upstream and late downstream, so each shows content from inside the core."""
        width = min(handover_frames(self.frames), stop - start)
        times = start + width / 2 + (stop - start - width) * self.share
        done = ((t - times) / width + 0.5).clamp(0, 1)
        return done * done * (3 - 2 * done)

    def _shift(self, anchor: int, t: int) -> torch.Tensor:
        """(2, h, w): the layer anchored at ``anchor`` at frame ``t``, each pixel held at its
        last source inside the core."""
        paths, valid = (
            (self.forward, self.forward_valid)
            if t >= anchor
            else (self.backward, self.backward_valid)
        )
        held = valid.clamp_max(abs(t - anchor))
        return paths.gather(0, held[None, None].expand(1, 2, -1, -1))[0]

    def at(self, t: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Frame ``t``'s flowing layers as (weight (1, h, w), displacement (2, h, w)); layers
        of no weight left out."""
        marks = anchors(self.frames)
        before = torch.ones_like(self.share)
        out = []
        for index, anchor in enumerate(marks):
            if index + 1 < len(marks):
                after = self._handed_over(anchor, marks[index + 1], t)
            else:
                after = torch.zeros_like(self.share)
            weight = (before - after) * self.alpha
            if bool(weight.amax() > 0):
                out.append((weight[None], self._shift(anchor, t)))
            before = after
        return out
