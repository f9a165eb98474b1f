"""A family checkpoint's serving profile: the options considered, applying one, the record.

A :class:`FamilyChoice` is one point of what a worker can change on a loaded diffusers video
pipeline without changing what the deployment means: the denoiser's dtype, diffusers'
attention backend, regional compilation of the repeated blocks (``compile_repeated_blocks``),
a step cache (:mod:`workers.model.families.caching`) and the scheduler. How the weights are
stored and the frames decoded is decided from sizes (:mod:`workers.model.families.fit`) and
recorded beside it. :mod:`workers.model.families.tune` measures the choices; the result is a
:class:`FamilyProfile`, JSON with every measurement and why each option was accepted or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from workers.model.families.caching import Cache, denoiser, diffusers_pipe, enable_cache
from workers.model.families.fit import MemoryPlan
from workers.model.pipelines.checks import PSNR_FLOOR_DB, weights_hash

FAMILY_PROFILE_FILE = "family_profile.json"

Precision = Literal["fp32", "bf16"]
DTYPES: dict[Precision, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


class FamilyChoice(BaseModel):
    """How the denoiser runs: one point of the profile's search."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    precision: Precision = "fp32"
    attention: str = "native"  # a diffusers attention backend name
    compile_blocks: bool = False
    cache: Cache = "none"
    scheduler: str = ""  # a diffusers scheduler class; "" keeps the checkpoint's own

    def label(self) -> str:
        parts = [self.precision, "compiled blocks" if self.compile_blocks else "eager"]
        parts.append(f"attn {self.attention}")
        if self.cache != "none":
            parts.append(f"cache {self.cache}")
        if self.scheduler:
            parts.append(self.scheduler)
        return ", ".join(parts)


REFERENCE = FamilyChoice()  # fp32 eager, stock attention, no cache: what every choice must match


class FamilyMeasurement(BaseModel):
    # Identical frames have an infinite PSNR: written as JSON's Infinity, not null.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    choice: FamilyChoice
    option: str  # the axis this measurement tried (precision, attention, cache...)
    seconds_per_video: float
    psnr_db: float  # vs the fp32 eager reference; inf when identical
    denoiser_calls: int = 0
    block_linear_calls: int = 0
    accepted: bool
    note: str = ""


class FamilyProfile(BaseModel):
    """What was measured for one checkpoint on one device kind, and the pick."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    device: str
    torch: str
    diffusers: str
    pipeline: str
    weights: str
    size: str  # frames x height x width measured
    steps: int
    floor_db: float = PSNR_FLOOR_DB
    chosen: FamilyChoice
    memory: MemoryPlan = Field(default_factory=MemoryPlan)
    mag_ratios: list[float] = Field(default_factory=list)
    measured: list[FamilyMeasurement] = Field(default_factory=list)
    note: str = ""

    def summary(self) -> str:
        """One line for the boot log: the pick and every option's verdict."""
        verdicts = "; ".join(
            f"{m.option} {m.choice.label()}: {'ok' if m.accepted else m.note}"
            for m in self.measured
            if m.choice != self.chosen
        )
        return f"chosen [{self.chosen.label()}] memory {self.memory.storage}; {verdicts}"


def family_weights(model_dir: Path) -> str:
    """The weights hash a family profile is valid for: the denoiser's config and weights."""
    return weights_hash(model_dir, denoiser_dir(model_dir))


def denoiser_dir(model_dir: Path) -> str:
    """The subdirectory holding the denoiser's weights: ``transformer`` or ``unet``."""
    for name in ("transformer", "unet"):
        if (model_dir / name).is_dir():
            return name
    raise ValueError(f"{model_dir} has neither a transformer/ nor a unet/ directory")


def load_family_profile(model_dir: Path) -> dict[str, FamilyProfile]:
    """The entries of ``family_profile.json`` beside the model, per device kind."""
    path = model_dir / FAMILY_PROFILE_FILE
    if not path.is_file():
        return {}
    raw = _Profiles.model_validate_json(path.read_text())
    return raw.devices


def save_family_profile(model_dir: Path, entry: FamilyProfile) -> Path:
    """Add or replace ``entry`` (other devices' entries stay)."""
    devices = load_family_profile(model_dir)
    devices[entry.device] = entry
    path = model_dir / FAMILY_PROFILE_FILE
    path.write_text(_Profiles(devices=devices).model_dump_json(indent=2) + "\n")
    return path


class _Profiles(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    devices: dict[str, FamilyProfile] = Field(default_factory=dict)


# The diffusers class of each scheduler swap a family's rules name. "flow-match Euler shift" is
# a setting of the checkpoint's own scheduler, not another class: nothing to swap.
SWAP_CLASSES = {
    "UniPC flow": "UniPCMultistepScheduler",
    "DPM-Solver++ flow": "DPMSolverMultistepScheduler",
    "CogVideoX DPM": "CogVideoXDPMScheduler",
}


def scheduler_swaps(named: tuple[str, ...]) -> tuple[str, ...]:
    """The scheduler classes to try for a family's named swaps."""
    return tuple(SWAP_CLASSES[swap] for swap in named if swap in SWAP_CLASSES)


def set_scheduler(pipe: Any, name: str) -> None:
    """Replace the pipeline's scheduler by diffusers class ``name``, from the same config
    (a flow-matching checkpoint's swap keeps flow sigmas); raises ValueError for a name
    diffusers lacks."""
    import diffusers

    cls = getattr(diffusers, name, None)
    if cls is None or not hasattr(cls, "from_config"):
        raise ValueError(f"diffusers has no scheduler {name!r}")
    pipe = diffusers_pipe(pipe)
    config = dict(pipe.scheduler.config)
    if "FlowMatch" in type(pipe.scheduler).__name__ and "FlowMatch" not in name:
        shift = config.get("shift", 1.0)
        config.update(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=shift)
    pipe.scheduler = cls.from_config(config)


def apply_choice(
    pipe: Any,
    choice: FamilyChoice,
    steps: int,
    mag_ratios: list[float] | None = None,
) -> Any:
    """Set ``choice`` on a freshly loaded pipeline (a diffusers pipeline or a family adapter
    holding one) in place and return it. The VAE stays
    fp32 (it decodes once per video and is the most precision-sensitive part). Raises
    ValueError (or diffusers' own error) when an option cannot apply to this pipeline."""
    loaded, pipe = pipe, diffusers_pipe(pipe)
    module = denoiser(pipe)
    if choice.precision != "fp32":
        module.to(DTYPES[choice.precision])
        for name in ("text_encoder", "image_encoder"):
            encoder = getattr(pipe, name, None)
            if isinstance(encoder, torch.nn.Module):
                encoder.to(DTYPES[choice.precision])
    dispatching = any(
        hasattr(getattr(layer, "processor", None), "_attention_backend")
        for layer in module.modules()
    )
    if dispatching:
        # Pinned on every pipeline, "native" included: diffusers also makes the last backend
        # set the process-wide default of processors that have none.
        module.set_attention_backend(choice.attention)  # type: ignore[operator]
    elif choice.attention != "native":
        name = type(module).__name__
        raise ValueError(f"{name}'s attention does not dispatch through diffusers' backends")
    if choice.scheduler:
        set_scheduler(pipe, choice.scheduler)
    enable_cache(pipe, choice.cache, steps, mag_ratios)
    if choice.compile_blocks:
        if not getattr(module, "_repeated_blocks", None):
            raise ValueError(f"{type(module).__name__} declares no repeated blocks to compile")
        module.compile_repeated_blocks(fullgraph=False, dynamic=False)  # type: ignore[operator]
    return loaded
