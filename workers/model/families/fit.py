"""Whether a checkpoint's weights fit the device, and how to serve them when they do not.

Decided from sizes, not measured: the weights' bytes at the serving dtype against the
device's memory with headroom for activations. In order of preference: resident (everything
on the device); layerwise fp8 storage of the denoiser (weights kept in float8 and upcast one
layer at a time to the compute dtype: half the bf16 bytes); group offloading (the denoiser's
blocks live in host memory and move onto the GPU one group at a time, overlapped with compute
on a CUDA stream). A checkpoint that fits none of these is refused with the figures.

Large frames also get VAE tiling (decode in overlapping tiles) and slicing (one video of a
batch at a time): the decoder's activations grow with frames x height x width, not with
the weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict

Storage = Literal["resident", "fp8_layerwise", "group_offload"]

HEADROOM = 1.3  # weights x this must fit: activations, the VAE decode, the allocator's slack
TILING_PIXELS = 512 * 512 * 25  # decoded pixels (frames x height x width) above which to tile
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


class FitError(ValueError):
    """The weights fit the device in no way the profile can serve."""


class MemoryPlan(BaseModel):
    """How the weights are stored and the frames decoded, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    storage: Storage = "resident"
    vae_tiling: bool = False
    vae_slicing: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Footprint:
    """Bytes of a checkpoint's weights at one dtype: the denoiser and all the rest."""

    denoiser: int
    other: int
    largest_block: int

    @property
    def total(self) -> int:
        return self.denoiser + self.other


def device_memory(device: str) -> int:
    """Free bytes on ``device``: the GPU's free memory, or the host's available memory."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return host_memory()


def host_memory() -> int:
    """The host's available memory (``MemAvailable``), else its physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def plan_memory(
    footprint: Footprint,
    device: str,
    device_bytes: int,
    host_bytes: int,
    decoded_pixels: int,
    batch: int = 1,
) -> MemoryPlan:
    """The storage that fits ``device_bytes`` (and ``host_bytes`` for offloading); raises
    :class:`FitError` with the figures when none does."""
    gib = 1 << 30
    tiling = decoded_pixels > TILING_PIXELS
    need = footprint.total * HEADROOM
    sizes = f"weights {footprint.total / gib:.1f} GiB, device {device_bytes / gib:.1f} GiB free"
    if need <= device_bytes:
        return MemoryPlan(
            storage="resident",
            vae_tiling=tiling,
            vae_slicing=batch > 1,
            reason=f"resident: {sizes}",
        )
    fp8 = (footprint.denoiser / 2 + footprint.other) * HEADROOM  # from 2-byte weights
    if fp8 <= device_bytes:
        return MemoryPlan(
            storage="fp8_layerwise",
            vae_tiling=True,
            vae_slicing=True,
            reason=f"denoiser stored in fp8 ({fp8 / gib:.1f} GiB with headroom): {sizes}",
        )
    resident = (footprint.other + footprint.largest_block) * HEADROOM
    if device.startswith("cuda") and resident <= device_bytes and footprint.total <= host_bytes:
        return MemoryPlan(
            storage="group_offload",
            vae_tiling=True,
            vae_slicing=True,
            reason=f"denoiser blocks offloaded to host memory, one on the GPU at a time: {sizes}",
        )
    raise FitError(
        f"the weights cannot be served on {device}: {sizes}, host {host_bytes / gib:.1f} GiB; "
        f"even fp8 storage needs {fp8 / gib:.1f} GiB"
        + ("" if device.startswith("cuda") else " (offloading needs a GPU)")
    )


def apply_memory_plan(pipe: object, plan: MemoryPlan, device: str, compute: torch.dtype) -> None:
    """Set ``plan`` on a loaded pipeline before it is moved to ``device``."""
    from workers.model.families.caching import denoiser

    module = denoiser(pipe)
    if plan.storage == "fp8_layerwise":
        module.enable_layerwise_casting(  # type: ignore[operator]
            storage_dtype=torch.float8_e4m3fn, compute_dtype=compute
        )
    elif plan.storage == "group_offload":
        module.enable_group_offload(  # type: ignore[operator]
            onload_device=torch.device(device),
            offload_device=torch.device("cpu"),
            offload_type="block_level",
            num_blocks_per_group=1,
            use_stream=True,
        )
    vae = getattr(pipe, "vae", None)
    if plan.vae_tiling and callable(getattr(vae, "enable_tiling", None)):
        vae.enable_tiling()  # type: ignore[union-attr]
    if plan.vae_slicing and callable(getattr(vae, "enable_slicing", None)):
        vae.enable_slicing()  # type: ignore[union-attr]


def _header(path: Path) -> dict[str, dict[str, object]]:
    """A safetensors file's header (name -> dtype, shape, offsets), read without the data."""
    import json
    import struct

    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, dict[str, object]] = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return header


def footprint(model_dir: Path, denoiser_dir: str, dtype_bytes: int) -> Footprint:
    """The checkpoint's bytes when served with ``dtype_bytes`` per parameter, counted from
    its safetensors headers (the files may be stored in another dtype)."""
    denoiser = other = 0
    blocks: dict[str, int] = {}
    for path in model_dir.glob("*/*.safetensors"):
        for name, entry in _header(path).items():
            shape = entry.get("shape")
            numel = 1
            for dim in shape if isinstance(shape, list) else []:
                numel *= int(dim)
            size = numel * dtype_bytes
            if path.parent.name != denoiser_dir:
                other += size
                continue
            denoiser += size
            parts = name.split(".")
            if len(parts) > 2 and parts[1].isdigit():  # transformer_blocks.<i>.…
                key = f"{parts[0]}.{parts[1]}"
                blocks[key] = blocks.get(key, 0) + size
    return Footprint(denoiser, other, max(blocks.values(), default=denoiser))
