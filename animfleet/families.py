"""The image-to-video model families a fleet serves, and each family's rules for a job.

A checkpoint directory written by diffusers' ``save_pretrained`` names its pipeline class in
``model_index.json`` (``_class_name``); that class picks the family. Each family states what a
job may ask of it: the frame counts its VAE's temporal compression allows (``step * k + 1``),
the multiple its sides must be (the VAE's spatial compression times the transformer's patch),
the most frames it generates, whether it reads a prompt (and a negative prompt), its guidance
form, whether it can condition the last frame (what ``loop`` needs), and which scheduler swaps
keep its quality. :func:`read_spec` reads the numbers a checkpoint fixes from its own configs;
:func:`fit_job` applies the rules to a job: an adjustment it can make is made by a stated rule
and listed (asked and delivered), anything else is refused naming the field, model and rule.

The dispatcher records the spec on a version when it is pushed and checks each job against it
at submit; a worker reads it again from the directory it loads. Both refuse an unknown class,
naming it and the supported families.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from animfleet.errors import PermanentError

# The project's own motion model (its pipeline class); every other class must be a family's.
BUILT_IN_CLASS = "AnimationPipeline"


class UnknownFamily(PermanentError, ValueError):
    """A checkpoint whose pipeline class no family serves."""


@dataclass(frozen=True)
class Family:
    """One family's fixed rules; the numbers a checkpoint may change are read by
    :func:`read_spec` (these are the released checkpoints' values)."""

    name: str
    title: str
    classes: tuple[str, ...]
    frame_step: int  # frames = frame_step * k + 1 (1: any count)
    max_frames: int
    size_multiple: int
    reads_text: bool
    guidance: str  # what ``guidance`` scales, in words
    loop_classes: tuple[str, ...]  # the classes that can condition the last frame
    scheduler_swaps: tuple[str, ...]
    default_guidance: float
    # What the diffusers pipeline itself requires the sides to divide by, whatever the VAE.
    pipeline_multiple: int = 8
    min_frames: int = 2


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            name="svd",
            title="Stable Video Diffusion",
            classes=("StableVideoDiffusionPipeline",),
            frame_step=1,
            max_frames=25,
            size_multiple=8,
            reads_text=False,
            guidance="image CFG: the scale rises over the frames from 1 to guidance",
            loop_classes=(),
            scheduler_swaps=(),
            default_guidance=3.0,
        ),
        Family(
            name="ltx",
            title="LTX-Video",
            classes=("LTXImageToVideoPipeline", "LTXConditionPipeline"),
            frame_step=8,
            max_frames=257,
            size_multiple=32,
            reads_text=True,
            guidance="text CFG scale",
            loop_classes=("LTXConditionPipeline",),
            scheduler_swaps=("flow-match Euler shift",),
            default_guidance=3.0,
            pipeline_multiple=32,
        ),
        Family(
            name="wan",
            title="Wan 2.1 / 2.2",
            classes=("WanImageToVideoPipeline",),
            frame_step=4,
            max_frames=81,
            size_multiple=16,
            reads_text=True,
            guidance="text CFG scale (2.2: both experts)",
            loop_classes=("WanImageToVideoPipeline",),
            scheduler_swaps=("UniPC flow", "DPM-Solver++ flow"),
            default_guidance=5.0,
            pipeline_multiple=16,
        ),
        Family(
            name="cogvideox",
            title="CogVideoX",
            classes=("CogVideoXImageToVideoPipeline",),
            frame_step=4,
            max_frames=49,
            size_multiple=16,
            reads_text=True,
            guidance="text CFG scale",
            loop_classes=(),
            scheduler_swaps=("CogVideoX DPM",),
            default_guidance=6.0,
        ),
        Family(
            name="hunyuan",
            title="HunyuanVideo",
            # HunyuanVideo 1.5's pipeline (diffusers 0.42) takes no per-step callback, which
            # progress and cancel need: not served until it does.
            classes=("HunyuanVideoImageToVideoPipeline",),
            frame_step=4,
            max_frames=129,
            size_multiple=16,
            reads_text=True,
            guidance="true CFG scale (1.0: embedded guidance)",
            loop_classes=(),
            scheduler_swaps=(),
            default_guidance=6.0,
            pipeline_multiple=16,
        ),
    )
}
_BY_CLASS = {cls: family for family in FAMILIES.values() for cls in family.classes}


def supported_classes() -> list[str]:
    return sorted(_BY_CLASS)


def family_of(class_name: str) -> Family:
    """The family serving ``class_name``; raises :class:`UnknownFamily` naming it and the
    supported families."""
    family = _BY_CLASS.get(class_name)
    if family is None:
        raise UnknownFamily(
            f"pipeline class {class_name!r} is not a supported image-to-video family; "
            f"supported: the built-in {BUILT_IN_CLASS} and {supported_message()}"
        )
    return family


class FamilySpec(BaseModel):
    """What one checkpoint allows a job: its family's rules with the numbers its own configs
    fix. Recorded on the version when pushed; read again by the worker that loads it."""

    model_config = ConfigDict(frozen=True)

    family: str
    pipeline_class: str
    frame_step: int
    max_frames: int
    size_multiple: int
    # Both sides must be exactly these (learned positional embeddings); None: any multiple.
    fixed_size: tuple[int, int] | None = None
    reads_text: bool
    loops: bool

    @property
    def rules(self) -> Family:
        return FAMILIES[self.family]

    def legal_frames(self, frames: int) -> int:
        """The nearest count of the form ``frame_step * k + 1`` (ties up), within bounds."""
        if self.frame_step == 1:
            return frames
        k = max(1, round((frames - 1) / self.frame_step + 1e-9))
        return min(k * self.frame_step + 1, self.max_frames)


def class_name_of(model_dir: str | Path) -> str:
    """The ``_class_name`` a ``save_pretrained`` directory names ("" when it names none)."""
    index = json.loads((Path(model_dir) / "model_index.json").read_text())
    return str(index.get("_class_name", ""))


def supported_message() -> str:
    return ", ".join(f"{f.title} ({', '.join(f.classes)})" for f in FAMILIES.values())


def _config(model_dir: Path, part: str) -> dict[str, Any]:
    path = model_dir / part / "config.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _spatial_scale(family: str, vae: dict[str, Any]) -> int:
    if vae.get("spatial_compression_ratio"):  # LTX, Hunyuan (LTX may leave it null)
        return int(vae["spatial_compression_ratio"])
    if family == "ltx":  # LTX's VAE: one 2x per spatio-temporal scaling, times its patch
        scaling = vae.get("spatio_temporal_scaling", (True,) * 3)
        return int(2 ** sum(bool(s) for s in scaling) * vae.get("patch_size", 4))
    if family == "wan":
        return int(2 ** len(vae.get("temperal_downsample", (0, 0, 0))))
    blocks = vae.get("block_out_channels")
    return int(2 ** (len(blocks) - 1)) if blocks else 8


def _temporal_scale(family: str, vae: dict[str, Any]) -> int:
    if vae.get("temporal_compression_ratio"):
        return int(vae["temporal_compression_ratio"])
    if family == "ltx":
        scaling = vae.get("spatio_temporal_scaling", (True,) * 3)
        return int(2 ** sum(bool(s) for s in scaling) * vae.get("patch_size_t", 1))
    if family == "wan":
        return int(2 ** sum(bool(s) for s in vae.get("temperal_downsample", (0, 1, 1))))
    return 1


def read_spec(model_dir: str | Path) -> FamilySpec:
    """The spec of a checkpoint directory; raises :class:`UnknownFamily` for a class no family
    serves and ValueError for a directory without ``model_index.json``."""
    model_dir = Path(model_dir)
    if not (model_dir / "model_index.json").exists():
        raise ValueError(f"{model_dir} has no model_index.json (not a save_pretrained directory)")
    class_name = class_name_of(model_dir)
    family = family_of(class_name)
    vae, transformer = _config(model_dir, "vae"), _config(model_dir, "transformer")
    patch = transformer.get("patch_size", 1)
    spatial_patch = int(patch[-1] if isinstance(patch, list) else patch)
    if family.name == "svd":  # the U-Net halves the latent once per down block but the last
        spatial_patch = 2 ** (len(_config(model_dir, "unet").get("down_block_types", "x")) - 1)
    fixed_size = None
    max_frames = family.max_frames
    if family.name == "cogvideox":
        # CogVideoX 1.0's learned positional embeddings fix the size and the clip's length.
        if transformer.get("use_learned_positional_embeddings"):
            scale = _spatial_scale(family.name, vae)
            fixed_size = (
                int(transformer["sample_width"]) * scale,
                int(transformer["sample_height"]) * scale,
            )
        max_frames = int(transformer.get("sample_frames", max_frames))
    loops = class_name in family.loop_classes
    if family.name == "wan":  # 2.1 conditions the last frame only in first-and-last-frame
        # checkpoints (their image tokens carry positions for two images); 2.2 always can
        index = json.loads((model_dir / "model_index.json").read_text())
        has_image_encoder = (index.get("image_encoder") or [None])[0] is not None
        loops = not has_image_encoder or bool(transformer.get("pos_embed_seq_len"))
    return FamilySpec(
        family=family.name,
        pipeline_class=class_name,
        frame_step=_temporal_scale(family.name, vae),
        max_frames=max_frames,
        size_multiple=math.lcm(
            family.pipeline_multiple, _spatial_scale(family.name, vae) * spatial_patch
        ),
        fixed_size=fixed_size,
        reads_text=family.reads_text,
        loops=loops,
    )


def spec_of_checkpoint(model_dir: str | Path) -> FamilySpec | None:
    """The family spec of a checkpoint to push or serve: None for the built-in model; raises
    :class:`UnknownFamily` for a class no family serves."""
    if class_name_of(model_dir) == BUILT_IN_CLASS:
        return None
    return read_spec(model_dir)


class Adjustment(BaseModel):
    """One value a family could not honour exactly, changed by its stated rule."""

    model_config = ConfigDict(frozen=True)

    field: str
    asked: int
    delivered: int
    rule: str


class Refused(PermanentError, ValueError):
    """A job a family cannot run: the field, and a message naming the model and the rule."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class JobAsk:
    """What a job asks that a family's rules judge."""

    frames: int
    width: int
    height: int
    loop: bool = False
    regions: bool = False
    negative_prompt: bool = False
    size_given: bool = True  # False: the size was the default, fitted to the image


@dataclass(frozen=True)
class Fitted:
    frames: int
    width: int
    height: int
    adjustments: tuple[Adjustment, ...]


def _round_side(side: int, multiple: int) -> int:
    return max(multiple, round(side / multiple) * multiple)


def fit_job(spec: FamilySpec, model: str, ask: JobAsk) -> Fitted:
    """The job as ``spec`` runs it, with what was adjusted; raises :class:`Refused` for what
    the family cannot do (the message names the model and the rule)."""
    family = spec.rules
    where = f"model {model} ({family.title}, {spec.pipeline_class})"
    if ask.regions:
        raise Refused(
            "regions",
            f"{where} generates its own motion: stroke-driven regions are the built-in "
            "model's procedural brush; use the prompt, or mask to choose what moves",
        )
    if ask.loop and not spec.loops:
        raise Refused(
            "loop", f"{where} cannot condition the last frame, which a seamless loop needs"
        )
    if ask.negative_prompt and not spec.reads_text:
        raise Refused("negative_prompt", f"{where} reads no text")
    if ask.frames > spec.max_frames:
        raise Refused(
            "frames", f"{where} generates at most {spec.max_frames} frames (got {ask.frames})"
        )
    adjustments: list[Adjustment] = []
    frames = spec.legal_frames(ask.frames)
    if frames != ask.frames:
        rule = f"frames are {spec.frame_step}k+1: the nearest such count"
        adjustments.append(
            Adjustment(field="frames", asked=ask.frames, delivered=frames, rule=rule)
        )
    if spec.fixed_size is not None:
        width, height = spec.fixed_size
        if ask.size_given and (ask.width, ask.height) != spec.fixed_size:
            raise Refused(
                "width",
                f"{where} renders only {width}x{height} (learned positional embeddings); "
                f"got {ask.width}x{ask.height}",
            )
    else:
        width = _round_side(ask.width, spec.size_multiple)
        height = _round_side(ask.height, spec.size_multiple)
    rule = f"sides are multiples of {spec.size_multiple}: the nearest"
    for field, asked, delivered in (("width", ask.width, width), ("height", ask.height, height)):
        if asked != delivered:
            adjustments.append(Adjustment(field=field, asked=asked, delivered=delivered, rule=rule))
    return Fitted(frames, width, height, tuple(adjustments))
