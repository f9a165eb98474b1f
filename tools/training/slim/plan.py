"""PCA slimming of a :class:`MotionUNet`: per-layer widths chosen by the weights, and a thinner
U-Net initialised from the wide one.

**Which widths are free.** A MotionUNet has three kinds of widths: the residual stream of each
down level (``block_out_channels``), the output of each up block (``up_block_out_channels``)
and the hidden width inside each ResBlock (``inner_channels``). Every width is shared by one or
more *channel sets*, each with the layers that write it: a down level's stream is written by
the stem or the skip conv and every spatial2 conv on that identity path, its downsampled copy
by the downsample conv; a block's hidden width holds the spatial conv's outputs and, a separate
set, the temporal conv's outputs.

**PCA per layer.** Each layer's filters (one row per output channel: the flattened kernel and
its bias) are points; the centred PCA of those rows gives the variance share of every
component. A layer's width at share ``s`` is the number of components that keeps ``s`` of it;
a configured width is the largest of its layers' (no layer is cut below its share), rounded up
to a multiple of 8 because every GroupNorm here has 8 groups.

**Initialisation: the principal subspace, represented by real filters.** GroupNorm and SiLU act
channel by channel, so rotating a layer's outputs into the principal basis would change the
network's function even at full width. Instead, each channel set keeps the ``k`` filters that
best span its top-``k`` principal subspace (column-pivoted QR on the channels' principal
coordinates, layers' rows scaled to equal weight), and every layer is sliced to the kept
channels, in their original order. At full width nothing is dropped and the slimmed U-Net is
the wide one exactly; below it, the kept filters reproduce the layer's outputs up to
:func:`projection`'s residual, and distillation recovers the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workers.model.networks.motion_unet import MotionUNet

GROUP = 8  # GroupNorm groups: every width is a multiple of this


@dataclass(frozen=True)
class ChannelSet:
    """Channels that the same config width sizes, and the layers (module paths) writing them."""

    name: str
    width: str  # "block.L", "up.I" or "inner.B"
    producers: tuple[str, ...]


@dataclass
class SlimPlan:
    """Widths per config slot, and what PCA found per layer."""

    widths: dict[str, int]
    layer_widths: dict[str, int] = field(default_factory=dict)  # PCA width of each layer
    variance_kept: dict[str, float] = field(default_factory=dict)  # per layer, at its slot width
    keep: dict[str, list[int]] = field(default_factory=dict)  # channel set -> kept channels


def _resblocks(levels: int) -> list[str]:
    return [f"down.{i}" for i in range(levels)] + ["mid"] + [f"up.{i}" for i in range(levels)]


def channel_sets(levels: int) -> list[ChannelSet]:
    """Every channel set of a MotionUNet with ``levels`` levels (see the module docstring)."""
    sets = []
    for level in range(levels):
        writers = ["stem" if level == 0 else f"down.{level}.skip", f"down.{level}.spatial2"]
        if level == levels - 1:
            writers.append("mid.spatial2")  # the mid block's skip is the identity
        sets.append(ChannelSet(f"stream.{level}", f"block.{level}", tuple(writers)))
        if level < levels - 1:
            sets.append(
                ChannelSet(f"downsampled.{level}", f"block.{level}", (f"downsample.{level}",))
            )
    for index in range(levels):
        up = f"up.{index}"
        sets.append(ChannelSet(f"{up}.out", f"up.{index}", (f"{up}.spatial2", f"{up}.skip")))
    for block in _resblocks(levels):
        sets.append(ChannelSet(f"{block}.hidden", f"inner.{block}", (f"{block}.spatial",)))
        sets.append(ChannelSet(f"{block}.mixed", f"inner.{block}", (f"{block}.temporal",)))
    return sets


def current_widths(config: Any) -> dict[str, int]:
    """The slot widths of a MotionUNet config, per-layer fields filled in."""
    blocks = list(config.block_out_channels)
    levels = len(blocks)
    ups = list(config.get("up_block_out_channels") or reversed(blocks))
    resblocks = _resblocks(levels)
    default_inner = [*blocks, blocks[-1], *ups]
    inner = list(config.get("inner_channels") or default_inner)
    widths = {f"block.{i}": w for i, w in enumerate(blocks)}
    widths.update({f"up.{i}": w for i, w in enumerate(ups)})
    widths.update({f"inner.{b}": w for b, w in zip(resblocks, inner, strict=True)})
    return widths


def slim_config(config: Any, widths: dict[str, int]) -> dict[str, Any]:
    """``config`` (a MotionUNet's) with the per-layer widths of ``widths``."""
    levels = len(config.block_out_channels)
    base = {k: v for k, v in dict(config).items() if not k.startswith("_")}
    return {
        **base,
        "block_out_channels": [widths[f"block.{i}"] for i in range(levels)],
        "up_block_out_channels": [widths[f"up.{i}"] for i in range(levels)],
        "inner_channels": [widths[f"inner.{b}"] for b in _resblocks(levels)],
    }


# -- PCA -------------------------------------------------------------------------------------


def filter_rows(layer: nn.Module) -> torch.Tensor:
    """(out channels, fan-in + 1): each output channel's flattened kernel and its bias."""
    weight = getattr(layer, "weight").detach().double().flatten(1)  # noqa: B009  (nn.Module)
    bias = getattr(layer, "bias").detach().double()[:, None]  # noqa: B009
    return torch.cat([weight, bias], dim=1)


def _spectrum(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The centred rows' principal variances (descending) and each row's coordinates along the
    principal axes (unscaled), from the rows' Gram matrix: channels are few, fan-ins long."""
    centred = rows - rows.mean(dim=0, keepdim=True)
    energy, axes = torch.linalg.eigh(centred @ centred.T)
    return energy.flip(0).clamp_min(0), axes.flip(1)


def variance_shares(rows: torch.Tensor) -> torch.Tensor:
    """Cumulative share of the rows' variance kept by the first 1, 2, ... principal components
    (as many entries as rows; the last is 1)."""
    energy = _spectrum(rows)[0]
    total = float(energy.sum())
    if total == 0:
        return torch.ones(rows.shape[0], dtype=torch.float64)
    return (torch.cumsum(energy, 0) / total).clamp(max=1.0)


def pca_width(rows: torch.Tensor, share: float) -> int:
    """The fewest principal components keeping ``share`` of the rows' variance (all rows at
    ``share >= 1``; at least one)."""
    if share >= 1:
        return rows.shape[0]
    shares = variance_shares(rows)
    # A tolerance: a spectrum that sums to exactly ``share`` must not need one more component.
    return int((shares < share - 1e-9).sum()) + 1


def round_width(width: float, limit: int) -> int:
    """Up to a multiple of GROUP, at least GROUP and at most ``limit``."""
    return min(limit, max(GROUP, GROUP * math.ceil(width / GROUP - 1e-9)))


def select_channels(rows: torch.Tensor, count: int) -> list[int]:
    """The ``count`` rows that best span the rows' top-``count`` principal subspace: greedy
    column-pivoted QR (Gram-Schmidt) on their principal coordinates, returned sorted."""
    if count >= rows.shape[0]:
        return list(range(rows.shape[0]))
    energy, axes = _spectrum(rows)
    coordinates = (axes[:, :count] * energy[:count].sqrt()).clone()  # (channels, count)
    chosen: list[int] = []
    for _ in range(count):
        norms = coordinates.norm(dim=1)
        norms[chosen] = -1
        pick = int(norms.argmax())
        chosen.append(pick)
        axis = coordinates[pick] / coordinates[pick].norm().clamp_min(1e-12)
        coordinates -= torch.outer(coordinates @ axis, axis)
    return sorted(chosen)


def projection(rows: torch.Tensor, keep: list[int]) -> tuple[torch.Tensor, float]:
    """Least-squares coefficients (rows, kept) writing every filter as a combination of the
    kept ones (identity on the kept rows), and the share of the filters' energy they keep.

    Layer outputs are linear in the filters, so ``coefficients @ kept outputs`` is the layer's
    output with every filter replaced by its projection: exact at full width.
    """
    kept = rows[keep]
    coefficients = torch.linalg.lstsq(kept.T, rows.T).solution.T
    residual = rows - coefficients @ kept
    energy = float((rows - rows.mean(dim=0)).pow(2).sum())
    lost = float(residual.pow(2).sum())
    return coefficients, 1.0 if energy == 0 else max(0.0, 1 - lost / energy)


def _set_rows(unet: MotionUNet, channel_set: ChannelSet) -> torch.Tensor:
    """A channel set's descriptor: its writers' rows side by side, each scaled to unit norm so
    no layer dominates the PCA by the scale of its weights."""
    blocks = [filter_rows(unet.get_submodule(path)) for path in channel_set.producers]
    return torch.cat([b / b.norm().clamp_min(1e-12) for b in blocks], dim=1)


def plan_pca(unet: MotionUNet, share: float) -> SlimPlan:
    """Widths keeping ``share`` of every layer's filter variance, and the channels kept."""
    levels = len(unet.config.block_out_channels)
    limits = current_widths(unet.config)
    wanted: dict[str, float] = dict.fromkeys(limits, 0.0)
    layer_widths: dict[str, int] = {}
    sets = channel_sets(levels)
    for channel_set in sets:
        for path in channel_set.producers:
            layer_widths[path] = pca_width(filter_rows(unet.get_submodule(path)), share)
            wanted[channel_set.width] = max(wanted[channel_set.width], layer_widths[path])
    widths = {slot: round_width(w, limits[slot]) for slot, w in wanted.items()}
    plan = SlimPlan(_keep_skips_convolutional(widths, limits), layer_widths)
    _choose_channels(unet, plan, sets)
    return plan


def plan_uniform(unet: MotionUNet, parameters: int) -> SlimPlan:
    """Every width scaled by one factor, the factor whose parameter count is nearest to
    ``parameters`` (widths round to multiples of 8, so the match is approximate)."""
    limits = current_widths(unet.config)
    best: tuple[int, dict[str, int]] | None = None
    seen = set()
    for step in range(50, 1001):
        factor = step / 1000
        # Nearest multiple of 8 (not up): more distinct parameter counts to match.
        scaled = {
            slot: round_width(round(w * factor / GROUP) * GROUP, w) for slot, w in limits.items()
        }
        widths = _keep_skips_convolutional(scaled, limits)
        if tuple(widths.values()) in seen:
            continue
        seen.add(tuple(widths.values()))
        gap = abs(count_parameters(unet.config, widths) - parameters)
        if best is None or gap < best[0]:
            best = (gap, widths)
    assert best is not None
    plan = SlimPlan(best[1])
    _choose_channels(unet, plan, channel_sets(len(unet.config.block_out_channels)))
    return plan


def _choose_channels(unet: MotionUNet, plan: SlimPlan, sets: list[ChannelSet]) -> None:
    for channel_set in sets:
        count = plan.widths[channel_set.width]
        rows = _set_rows(unet, channel_set)
        plan.keep[channel_set.name] = select_channels(rows, count)
        for path in channel_set.producers:
            shares = variance_shares(filter_rows(unet.get_submodule(path)))
            plan.variance_kept[path] = round(float(shares[min(count, len(shares)) - 1]), 4)


def _keep_skips_convolutional(widths: dict[str, int], limits: dict[str, int]) -> dict[str, int]:
    """Widths that keep every ResBlock's skip path as it is: a block whose input and output
    widths became equal would get an identity skip instead of its trained 1x1 conv."""
    widths = dict(widths)
    levels = sum(1 for slot in widths if slot.startswith("block."))
    for level in range(1, levels):
        if widths[f"block.{level}"] == widths[f"block.{level - 1}"]:
            widths[f"block.{level}"] += GROUP  # below the original: that one is wider still
    channels = widths[f"block.{levels - 1}"]
    for index in range(levels):
        fan_in = channels + widths[f"block.{levels - 1 - index}"]
        if widths[f"up.{index}"] == fan_in:
            up = widths[f"up.{index}"]
            widths[f"up.{index}"] = (
                up + GROUP if up + GROUP <= limits[f"up.{index}"] else up - GROUP
            )
        channels = widths[f"up.{index}"]
    return widths


def count_parameters(config: Any, widths: dict[str, int]) -> int:
    """Parameters of the MotionUNet ``config`` would be with ``widths``, counted from the
    shapes (the width search calls this for every candidate; building models was slow)."""
    full = {**current_widths(config), **widths}
    levels = len(config.block_out_channels)
    embed: int = config.embed_dim
    patch: int = config.patch_size

    def block(fan_in: int, out: int, hidden: int) -> int:
        skip = fan_in * out + out if fan_in != out else 0
        return (
            2 * fan_in  # norm1
            + (fan_in * 9 + 1) * hidden  # spatial
            + (embed + 1) * 2 * hidden  # film
            + 2 * hidden  # norm2
            + (hidden * 3 + 1) * hidden  # temporal
            + (hidden * 9 + 1) * out  # spatial2
            + skip
        )

    stream = [full[f"block.{i}"] for i in range(levels)]
    total = ((config.in_channels + 3) * patch**2 * 9 + 1) * stream[0]  # stem
    total += 2 * (embed * embed + embed)  # time_mlp
    total += (2 * config.cross_attention_dim + 1) * embed + embed * embed + embed  # text_mlp
    if config.guidance_embedding:
        total += (2 * embed + 1) * embed + (embed + 1) * embed
    channels = stream[0]
    for level, width in enumerate(stream):
        total += block(channels, width, full[f"inner.down.{level}"])
        channels = width
        if level < levels - 1:
            total += (width * 9 + 1) * width  # downsample
    total += block(channels, channels, full["inner.mid"])
    total += (channels + embed + 2 + 1) * embed + (embed + 1) * embed + (embed + 1) * 4
    for index in range(levels):
        out = full[f"up.{index}"]
        total += block(channels + stream[levels - 1 - index], out, full[f"inner.up.{index}"])
        channels = out
    total += 2 * channels + (channels * 9 + 1) * 2  # head_norm, flow_head
    total += (channels * 9 + 1) * config.out_channels * patch**2  # residual_head
    return int(total)


# -- the slimmed U-Net -----------------------------------------------------------------------


def _slices(unet: MotionUNet, keep: dict[str, list[int]]) -> Iterator[tuple[str, list[Any]]]:
    """For every parameter, the kept index list of each dimension (None: all of it)."""
    levels = len(unet.config.block_out_channels)
    full = current_widths(unet.config)

    def cat(*parts: tuple[list[int] | None, int]) -> list[int]:
        out, offset = [], 0
        for indices, size in parts:
            out += [offset + i for i in (range(size) if indices is None else indices)]
            offset += size
        return out

    def block(path: str, fan_in: list[int], out: list[int], inner: int) -> Iterator[Any]:
        hidden, mixed = keep[f"{path}.hidden"], keep[f"{path}.mixed"]
        film = cat((hidden, inner), (hidden, inner))
        yield from [
            (f"{path}.norm1", [fan_in]),
            (f"{path}.spatial", [hidden, fan_in]),
            (f"{path}.film", [film, None]),
            (f"{path}.norm2", [hidden]),
            (f"{path}.temporal", [mixed, hidden]),
            (f"{path}.spatial2", [out, mixed]),
            (f"{path}.skip", [out, fan_in]),
        ]

    yield ("stem", [keep["stream.0"], None])
    stream = keep["stream.0"]
    for level in range(levels):
        out = keep[f"stream.{level}"]
        yield from block(f"down.{level}", stream, out, full[f"inner.down.{level}"])
        stream = out
        if level < levels - 1:
            yield (f"downsample.{level}", [keep[f"downsampled.{level}"], out])
            stream = keep[f"downsampled.{level}"]
    yield from block("mid", stream, stream, full["inner.mid"])
    # The motion head reads the pooled bottleneck, then the embedding and the frame position.
    bottleneck = full[f"block.{levels - 1}"]
    extra = unet.config.embed_dim + 2
    yield ("motion_head.0", [None, cat((stream, bottleneck), (None, extra))])
    channels, width = stream, bottleneck
    for index in range(levels):
        skip_level = levels - 1 - index
        skip_width = full[f"block.{skip_level}"]
        fan_in = cat((channels, width), (keep[f"stream.{skip_level}"], skip_width))
        out = keep[f"up.{index}.out"]
        yield from block(f"up.{index}", fan_in, out, full[f"inner.up.{index}"])
        channels, width = out, full[f"up.{index}"]
    yield ("head_norm", [channels])
    yield ("flow_head", [None, channels])
    yield ("residual_head", [None, channels])


def slim_unet(unet: MotionUNet, plan: SlimPlan) -> MotionUNet:
    """A MotionUNet with ``plan``'s widths whose weights are ``unet``'s kept channels."""
    state = {k: v.detach().clone() for k, v in unet.state_dict().items()}
    for path, dims in _slices(unet, plan.keep):
        for name in ("weight", "bias"):
            key = f"{path}.{name}"
            if key not in state:
                continue  # an identity skip, a bias-free layer
            tensor = state[key]
            for dim, indices in enumerate(dims[: tensor.dim()]):
                if indices is not None:
                    tensor = tensor.index_select(dim, torch.tensor(indices, dtype=torch.long))
            state[key] = tensor.contiguous()
    slim: MotionUNet = MotionUNet.from_config(slim_config(unet.config, plan.widths))
    slim.load_state_dict(state, strict=True)
    return slim.to(unet.dtype)  # type: ignore[no-any-return]


def flops_per_call(unet: MotionUNet, size: int = 32, frames: int = 8) -> int:
    """Floating-point operations of one U-Net call on one clip (size x size, ``frames``
    frames), as torch's FlopCounterMode counts them: convolutions, linears and matmuls."""
    from torch.utils.flop_counter import FlopCounterMode

    channels = unet.config.in_channels
    sample = torch.zeros(1, frames, channels, size, size, dtype=unet.dtype)
    context = torch.zeros(1, 2, unet.config.cross_attention_dim, dtype=unet.dtype)
    extra = {"guidance_scale": torch.ones(1, 2)} if unet.config.guidance_embedding else {}
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        unet(sample, torch.tensor([500]), encoder_hidden_states=context, **extra)
    return int(counter.get_total_flops())
