"""``serving_profile.json`` beside a model: the configuration measured fastest per device.

``animfleet model tune`` times every combination of precision, compilation, context de-dup and
attention backend on the worker's shape buckets, rejects those whose frames differ from the fp32
eager reference by more than the floor, and records the winner per device. A worker serves the
entry for its device; without one (no file, another device, other weights) it measures one at
boot (:mod:`workers.model.runtime.boot_tune`) or, with measuring off, serves :data:`SAFE` and says
why. Settings set explicitly in the environment still win.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Re-exported: the floor, PSNR and the weights hash are shared with the families' profiles.
from workers.model.pipelines.checks import PSNR_FLOOR_DB as PSNR_FLOOR_DB
from workers.model.pipelines.checks import psnr as psnr
from workers.model.pipelines.checks import weights_hash as weights_hash

PROFILE_FILE = "serving_profile.json"

Precision = Literal["bf16", "fp32"]
# "auto" lets torch pick the scaled-dot-product kernel; the others pin one (torch's SDPBackend).
Attention = Literal["auto", "math", "flash", "efficient", "cudnn"]


class Choice(BaseModel):
    """How the U-Net runs: one point of the tuner's grid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    precision: Precision = "fp32"
    compile: bool = False
    context_dedup: bool = True
    attention: Attention = "auto"

    def label(self) -> str:
        parts = [self.precision, "compiled" if self.compile else "eager"]
        parts += ["de-dup" if self.context_dedup else "stock attn", f"sdpa {self.attention}"]
        return ", ".join(parts)


# No profile: fp32 (the reference numerics; bf16 was slower on CPU), eager (nothing to compile
# at boot, nothing to verify), de-dup (exactly the stock attention's output, fewer FLOPs).
SAFE = Choice()


class Measurement(BaseModel):
    # Identical frames have an infinite PSNR: written as JSON's Infinity, not null.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    choice: Choice
    seconds_per_video: float
    psnr_db: float  # vs fp32 eager; inf when identical
    accepted: bool
    note: str = ""


class DeviceProfile(BaseModel):
    """What ``model tune`` measured on one device, and its pick."""

    model_config = ConfigDict(extra="forbid")

    device: str
    torch: str
    weights: str
    buckets: list[str]
    steps: int
    threads: int
    floor_db: float = PSNR_FLOOR_DB
    chosen: Choice
    measured: list[Measurement] = Field(default_factory=list)
    note: str = ""  # how it was measured (e.g. by a worker at boot, within its budget)


class ServingProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    devices: dict[str, DeviceProfile] = Field(default_factory=dict)


def device_key(device: str | torch.device = "cpu") -> str:
    """``cpu:<vector ISA>[+bf16][+amx]`` or ``cuda:<device name>``: a profile measured on one
    kind serves only that kind. CPUs differ as much as GPUs: without bf16 instructions, bf16
    ran the shipped student about 40x slower than fp32 (21 s vs 0.5 s a video on an AVX2
    EPYC), where a CPU with them measured it faster."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    if device.type != "cpu":
        return device.type
    features = [torch.backends.cpu.get_cpu_capability()]
    for name, check in (("bf16", "_is_avx512_bf16_supported"), ("amx", "_is_amx_tile_supported")):
        if getattr(torch.cpu, check, lambda: False)():
            features.append(name)
    return "cpu:" + "+".join(features)


def load_profile(model_dir: Path) -> ServingProfile | None:
    """The directory's profile, None without one; raises ValueError naming a broken file."""
    path = model_dir / PROFILE_FILE
    if not path.is_file():
        return None
    try:
        return ServingProfile.model_validate_json(path.read_text())
    except ValidationError as error:
        raise ValueError(f"{path}: {error}") from error


def save_profile(model_dir: Path, entry: DeviceProfile) -> Path:
    """Add or replace ``entry`` in the directory's profile (other devices' entries stay)."""
    profile = load_profile(model_dir) or ServingProfile()
    profile.devices[entry.device] = entry
    path = model_dir / PROFILE_FILE
    path.write_text(profile.model_dump_json(indent=2) + "\n")
    return path


def lookup(model_dir: Path, device: str) -> tuple[Choice | None, str]:
    """The profile's choice for ``device`` and where it came from; None and why when there is
    no valid entry (no file, an unreadable one, another device's, other weights)."""
    try:
        profile = load_profile(model_dir)
    except ValueError as error:
        return None, f"unreadable profile ({error})"
    if profile is None:
        return None, f"no {PROFILE_FILE} beside the model"
    entry = profile.devices.get(device)
    if entry is None:
        known = ", ".join(sorted(profile.devices)) or "none"
        return None, f"no profile for device {device!r} (profiled: {known})"
    weights = weights_hash(model_dir)
    if entry.weights != weights:
        return None, f"profile measured weights {entry.weights}, these are {weights}"
    return entry.chosen, f"profile for {device} (torch {entry.torch}, floor {entry.floor_db} dB)"


def choose(model_dir: Path, device: str) -> tuple[Choice, str]:
    """The profile's choice for ``device`` and where it came from, else :data:`SAFE` and why."""
    choice, source = lookup(model_dir, device)
    if choice is None:
        return SAFE, f"{source}; serving the safe choice"
    return choice, source
