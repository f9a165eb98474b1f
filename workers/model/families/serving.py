"""Which profile a worker serves a family checkpoint with: from the file, the bucket, or boot.

In order: the entry for this device kind in ``family_profile.json`` beside the checkpoint
(measured offline on the same weights); else the entry a peer of the same kind measured and
stored in the region's bucket (``serving-profiles/<weights hash>/<kind>.family.json``); else
the worker measures one at boot (:func:`workers.model.families.tune.tune`, within a budget)
and stores it there for its peers. With measuring off it serves fp32 eager and says why.

The memory plan is decided from sizes every boot (it depends on the device's free memory, not
on measurements): a checkpoint that fits in no way is refused before anything loads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from animfleet.families import JobAsk, family_of, fit_job, read_spec
from storage import ObjectStore, StorageError
from workers.model.families.fit import (
    DTYPE_BYTES,
    MemoryPlan,
    apply_memory_plan,
    device_memory,
    footprint,
    host_memory,
    plan_memory,
)
from workers.model.families.profile import (
    DTYPES,
    REFERENCE,
    FamilyChoice,
    FamilyProfile,
    apply_choice,
    denoiser_dir,
    family_weights,
    load_family_profile,
    scheduler_swaps,
)
from workers.model.families.registry import load_family
from workers.model.families.tune import Search, tune
from workers.model.pipelines.generation import GenerationParams

log = logging.getLogger("animfleet.worker.families")

SHARED_PREFIX = "serving-profiles"


def shared_key(weights: str, kind: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9+._-]", "_", kind)
    return f"{SHARED_PREFIX}/{weights}/{slug}.family.json"


@dataclass
class SharedFamilyProfiles:
    """Measured family entries in the region's bucket, so each kind is measured once."""

    objects: ObjectStore

    def read(self, weights: str, kind: str) -> FamilyProfile | None:
        key = shared_key(weights, kind)
        try:
            if self.objects.head(key) is None:
                return None
            entry = FamilyProfile.model_validate_json(self.objects.get(key))
        except (StorageError, ValidationError) as error:
            log.warning("families.shared_profile_unreadable key=%s: %s", key, error)
            return None
        return entry if entry.device == kind and entry.weights == weights else None

    def write(self, entry: FamilyProfile) -> None:
        key = shared_key(entry.weights, entry.device)
        try:
            self.objects.put(key, entry.model_dump_json(indent=2).encode(), "application/json")
        except StorageError as error:  # the next worker of this kind measures again
            log.warning("families.shared_profile_unwritten key=%s: %s", key, error)


@dataclass(frozen=True)
class Served:
    """The choice a worker serves, its memory plan, and where the choice came from."""

    choice: FamilyChoice
    memory: MemoryPlan
    source: str
    mag_ratios: tuple[float, ...] = ()

    def hook(self, device: str, steps: int) -> Callable[[Any], None]:
        """The adapters' profile hook: set this choice and plan on a loaded pipeline."""

        def apply(adapter: Any) -> None:
            apply_memory_plan(adapter.pipe, self.memory, device, DTYPES[self.choice.precision])
            apply_choice(adapter, self.choice, steps, list(self.mag_ratios))
            log.info(
                "families.serving choice=%r memory=%r source=%r",
                self.choice.label(),
                self.memory.reason,
                self.source,
            )

        return apply


def card_renderer(frames: int, height: int, width: int, steps: int) -> Callable[[Any], Any]:
    """One video of a loaded adapter with fixed inputs, at the size the worker serves."""
    rng = np.random.default_rng(0)
    image: npt.NDArray[np.uint8] = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    params = GenerationParams(
        prompt="a boat drifts on a calm lake",
        num_frames=frames,
        fps=8,
        num_inference_steps=steps,
    )
    return lambda adapter: adapter(image, params)


def choose_family_profile(
    model_dir: Path,
    load: Callable[[], Any],
    *,
    kind: str,
    device: str,
    size: tuple[int, int, int],
    steps: int,
    budget_s: float,
    shared: SharedFamilyProfiles | None = None,
    schedulers: tuple[str, ...] = (),
) -> Served:
    """What to serve ``model_dir`` with on device kind ``kind`` (see the module's docstring).
    ``load`` returns a freshly loaded fp32 family adapter; ``size`` is (frames, height, width).
    Raises :class:`workers.model.families.fit.FitError` when the weights cannot fit."""
    frames, height, width = size
    precision_bytes = DTYPE_BYTES["bf16" if kind.startswith("cuda:") else "fp32"]
    memory = plan_memory(
        footprint(model_dir, denoiser_dir(model_dir), precision_bytes),
        device,
        device_memory(device),
        host_memory(),
        frames * height * width,
    )
    weights = family_weights(model_dir)
    entry = load_family_profile(model_dir).get(kind)
    if entry is not None and entry.weights == weights:
        return Served(entry.chosen, memory, f"family profile for {kind}", tuple(entry.mag_ratios))
    if shared is not None:
        entry = shared.read(weights, kind)
        if entry is not None:
            source = f"measured by a peer of kind {kind} ({entry.note})"
            return Served(entry.chosen, memory, source, tuple(entry.mag_ratios))
    if budget_s <= 0 or memory.storage != "resident":
        why = "measuring off" if budget_s <= 0 else f"not measured: {memory.reason}"
        return Served(REFERENCE, memory, f"no family profile for {kind}; {why}")
    entry = tune(
        load,
        card_renderer(frames, height, width, steps),
        kind=kind,
        pipeline=read_spec(model_dir).pipeline_class,
        weights=weights,
        size=f"{frames}x{height}x{width}",
        steps=steps,
        search=Search.for_device(kind, scheduler_swaps(schedulers)),
        memory=memory,
        budget_s=budget_s,
        rounds=2,
    )
    if shared is not None:
        shared.write(entry)
    source = f"no family profile for {kind}: measured at boot ({entry.note})"
    return Served(entry.chosen, memory, source, tuple(entry.mag_ratios))


def serve_at_boot(
    model_dir: Path,
    *,
    kind: str,
    device: str,
    steps: int,
    bucket: tuple[int, int, int],
    budget_s: float,
    objects: ObjectStore | None,
) -> Served:
    """What a worker serves the family checkpoint ``model_dir`` with: its profile measured at
    ``bucket`` (frames, height, width), first fitted to the family's rules."""
    spec = read_spec(model_dir)
    frames, height, width = bucket
    fitted = fit_job(spec, model_dir.name, JobAsk(frames=frames, width=width, height=height))
    return choose_family_profile(
        model_dir,
        lambda: load_family(model_dir),
        kind=kind,
        device=device,
        size=(fitted.frames, fitted.height, fitted.width),
        steps=steps,
        budget_s=budget_s,
        shared=SharedFamilyProfiles(objects) if objects is not None else None,
        schedulers=family_of(spec.pipeline_class).scheduler_swaps,
    )
