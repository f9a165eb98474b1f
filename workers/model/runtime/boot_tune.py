"""A serving-profile entry for a device kind nobody profiled, measured when a worker boots.

A fleet meets many CPU and GPU kinds. A kind absent from ``serving_profile.json`` used to serve
the safe choice (fp32 eager), which on a CPU with bf16 instructions or on a GPU is far from its
fastest configuration. Instead the first worker of a new kind measures the candidates that kind
can run within a bounded budget, serves the fastest that stays within the PSNR floor of the
fp32 eager reference, and stores the entry in the region's bucket; later workers of that kind
read it there and measure nothing.

Candidates are timed in this process, round-robin after each is loaded (and compiled, warmed up
and verified as the worker would), on the shape bucket the worker serves, so load from other
processes slows every candidate alike. The budget is checked between loads and between rounds:
a load or a compile in progress is not interrupted, so a compiled candidate is only tried while
at least half the budget is left (compiling is the slow part of a boot).
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from pydantic import ValidationError

from storage import ObjectStore, StorageError
from workers.model.runtime.loading import ShapeBucket
from workers.model.runtime.profile import (
    PSNR_FLOOR_DB,
    Attention,
    Choice,
    DeviceProfile,
    Measurement,
    Precision,
    psnr,
    weights_hash,
)


class Candidate(Protocol):
    """What measuring needs of a loaded animator (``workers.model.animator.Animator``)."""

    @property
    def compiled(self) -> Any: ...  # None when it serves eagerly
    @property
    def variant(self) -> Any: ...  # its Variant: the step count is recorded

    def card_video(self, bucket: ShapeBucket) -> npt.NDArray[np.uint8]: ...


A = TypeVar("A", bound=Candidate)

log = logging.getLogger("animfleet.worker.model")

SHARED_PREFIX = "serving-profiles"
MAX_ROUNDS = 5  # timed videos per candidate at most; fewer when the budget runs out
MIN_ROUNDS = 2


def attention_kernels(kind: str) -> list[Attention]:
    """The scaled-dot-product kernels worth pinning on ``kind`` ("auto": torch's pick)."""
    if kind.startswith("cuda:"):
        return ["auto", "flash", "efficient", "cudnn"]
    return ["auto", "math", "flash"]


def candidates(kind: str, compiled: bool = True, attention: bool = False) -> list[Choice]:
    """What to measure on ``kind``, the fp32 eager reference first (it is also the fallback):
    the one list both the worker at boot and ``animfleet model tune`` measure.

    bf16 is tried only where the hardware has bf16 arithmetic (a GPU, a CPU whose key says
    ``+bf16``): on a CPU without it, bf16 ran the shipped student ~40x slower than fp32, so
    one video would spend the whole budget. With ``attention`` (a U-Net with attention, for the
    offline tuner) stock attention and each pinned kernel are measured too, and the reference
    is stock attention; otherwise de-dup with torch's kernel (de-dup is exact). Compiled
    candidates come last (slowest to load)."""
    precisions: list[Precision] = ["fp32"]
    if kind.startswith("cuda:") or "+bf16" in kind:
        precisions.append("bf16")
    dedups = [False, True] if attention else [True]
    kernels: list[Attention] = attention_kernels(kind) if attention else ["auto"]
    compiles = [False, True] if compiled else [False]
    return [
        Choice(precision=p, compile=c, context_dedup=d, attention=k)
        for c, p, d, k in itertools.product(compiles, precisions, dedups, kernels)
    ]


def shared_key(model_dir: Path, kind: str) -> str:
    """Where a measured entry is shared in the region's bucket: per weights and device kind."""
    slug = re.sub(r"[^A-Za-z0-9+._-]", "_", kind)
    return f"{SHARED_PREFIX}/{weights_hash(model_dir)}/{slug}.json"


@dataclass
class SharedProfiles:
    """Measured entries in the region's bucket, so each device kind is measured once."""

    objects: ObjectStore

    def read(self, model_dir: Path, kind: str) -> DeviceProfile | None:
        key = shared_key(model_dir, kind)
        try:
            if self.objects.head(key) is None:
                return None
            entry = DeviceProfile.model_validate_json(self.objects.get(key))
        except (StorageError, ValidationError) as error:
            log.warning("model.shared_profile_unreadable key=%s: %s", key, error)
            return None
        if entry.device != kind or entry.weights != weights_hash(model_dir):
            return None
        return entry

    def write(self, model_dir: Path, entry: DeviceProfile) -> None:
        key = shared_key(model_dir, entry.device)
        try:
            self.objects.put(key, entry.model_dump_json(indent=2).encode(), "application/json")
        except StorageError as error:  # the next worker of this kind measures again
            log.warning("model.shared_profile_unwritten key=%s: %s", key, error)


@dataclass
class _Trial(Generic[A]):
    choice: Choice
    animator: A
    times: list[float] = field(default_factory=list)
    frames: npt.NDArray[np.uint8] | None = None

    def video(self, bucket: ShapeBucket, keep: bool) -> None:
        started = time.perf_counter()
        self.frames = self.animator.card_video(bucket)
        if keep:
            self.times.append(time.perf_counter() - started)


@dataclass
class BootMeasurement(Generic[A]):
    """The entry measured at boot, and the loaded animator of its chosen candidate."""

    entry: DeviceProfile
    chosen: A


def _unmeasured(choice: Choice, note: str) -> Measurement:
    return Measurement(
        choice=choice, seconds_per_video=math.inf, psnr_db=-math.inf, accepted=False, note=note
    )


def measure(
    model_dir: Path,
    kind: str,
    build: Callable[[Choice], A],
    bucket: ShapeBucket,
    budget_s: float,
    compiled: bool = True,
    floor_db: float = PSNR_FLOOR_DB,
    clock: Callable[[], float] = time.monotonic,
) -> BootMeasurement[A]:
    """Load, warm up and time ``candidates(kind)`` within ``budget_s``; the reference is always
    measured. ``build(choice)`` returns a loaded animator (compiled and verified if the choice
    compiles). Raises whatever building the reference raises."""
    started = clock()

    def left() -> float:
        return budget_s - (clock() - started)

    trials: list[_Trial[A]] = []
    skipped: list[Measurement] = []
    for choice in candidates(kind, compiled):
        if trials and left() <= 0:
            skipped.append(_unmeasured(choice, "not measured: the boot budget was spent"))
            continue
        if trials and choice.compile and left() < budget_s / 2:
            note = "not measured: under half the boot budget was left for a compile"
            skipped.append(_unmeasured(choice, note))
            continue
        trial = _Trial(choice, build(choice))
        if choice.compile and trial.animator.compiled is None:
            note = "did not compile, or its frames failed the warm-up check"
            skipped.append(
                Measurement(
                    choice=choice,
                    seconds_per_video=math.inf,
                    psnr_db=-math.inf,
                    accepted=False,
                    note=note,
                )
            )
            continue
        trial.video(bucket, keep=False)  # first call: caches, lazy kernels
        trials.append(trial)
    for round_index in range(MAX_ROUNDS):
        if round_index >= MIN_ROUNDS and left() <= 0:
            break
        for trial in trials:
            trial.video(bucket, keep=True)
    reference = trials[0].frames
    assert reference is not None
    measured = []
    for trial in trials:
        assert trial.frames is not None
        quality = psnr(trial.frames, reference)
        accepted = quality >= floor_db
        measured.append(
            Measurement(
                choice=trial.choice,
                seconds_per_video=round(statistics.median(trial.times), 4),
                psnr_db=round(quality, 1) if math.isfinite(quality) else quality,
                accepted=accepted,
                note="" if accepted else f"below the {floor_db:g} dB floor",
            )
        )
    best = min((m for m in measured if m.accepted), key=lambda m: m.seconds_per_video)
    entry = DeviceProfile(
        device=kind,
        torch=torch.__version__,
        weights=weights_hash(model_dir),
        buckets=[f"{bucket.frames}x{bucket.height}x{bucket.width}"],
        steps=trials[0].animator.variant.steps,
        threads=torch.get_num_threads(),
        floor_db=floor_db,
        chosen=best.choice,
        measured=measured + skipped,
        note=f"measured at worker boot in {clock() - started:.1f} s (budget {budget_s:g} s)",
    )
    chosen = next(trial.animator for trial in trials if trial.choice == best.choice)
    return BootMeasurement(entry, chosen)
