"""The family adapter of every served pipeline class, in one place.

A worker loads a checkpoint directory with :func:`load_family`: the class its
``model_index.json`` names picks the adapter; a class no family serves is refused naming it and
the supported families (the same check ``animfleet model push`` and ``animfleet deploy`` make).
"""

from __future__ import annotations

from pathlib import Path

import torch

from animfleet.families import FAMILIES, family_of, read_spec
from workers.model.families.base import FamilyPipeline, ProfileHook
from workers.model.families.cogvideox import CogVideoXFamily
from workers.model.families.hunyuan import HunyuanFamily
from workers.model.families.ltx import LTXFamily
from workers.model.families.svd import SVDFamily
from workers.model.families.wan import WanFamily

ADAPTERS: dict[str, type[FamilyPipeline]] = {
    "svd": SVDFamily,
    "ltx": LTXFamily,
    "wan": WanFamily,
    "cogvideox": CogVideoXFamily,
    "hunyuan": HunyuanFamily,
}
assert set(ADAPTERS) == set(FAMILIES), "every family has exactly one adapter"


def adapter_for(class_name: str) -> type[FamilyPipeline]:
    """The adapter of a pipeline class; raises :class:`animfleet.families.UnknownFamily`."""
    return ADAPTERS[family_of(class_name).name]


def load_family(
    model_dir: str | Path,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    profile: ProfileHook | None = None,
) -> FamilyPipeline:
    """The directory's pipeline behind its family's adapter (see :meth:`FamilyPipeline.load`)."""
    adapter = adapter_for(read_spec(model_dir).pipeline_class)
    return adapter.load(model_dir, device, dtype, profile)
