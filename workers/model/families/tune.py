"""Measure a family checkpoint's serving profile: one option at a time, verified, timed.

The reference is the fp32 eager pipeline with stock attention and no cache, run on the
deployment's own weights at the size and step count it serves. Options are tried axis by
axis on top of the best choice so far (precision, attention backend, scheduler, step cache,
regional compile: a grid of every combination would be hundreds of videos): each candidate
of an axis is loaded and warmed up, then all of them and the current best are timed
round-robin in this process, so load from other processes slows them alike. A candidate is
accepted when its frames are within the PSNR floor of the reference, and taken when it is
also faster than the current best. An option that cannot apply to the pipeline (an attention
backend not installed, a cache on a denoiser without cache hooks) is recorded with why.

With random weights the step caches are expected to fail the floor (nothing about random
residuals is smooth across steps): they are rejected, which is the point of checking.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import diffusers
import numpy as np
import numpy.typing as npt
import torch

from workers.model.families.caching import CACHES, CallCounter, calibrate_mag_ratios, denoiser
from workers.model.families.fit import MemoryPlan
from workers.model.families.profile import (
    REFERENCE,
    FamilyChoice,
    FamilyMeasurement,
    FamilyProfile,
    apply_choice,
)
from workers.model.pipelines.checks import PSNR_FLOOR_DB, psnr

log = logging.getLogger("animfleet.worker.families")

Frames = npt.NDArray[np.uint8]
Load = Callable[[], Any]  # a freshly loaded fp32 pipeline of the checkpoint
Render = Callable[[Any], Frames]  # one video with fixed inputs (image, prompt, seed, size)

ROUNDS = 3


@dataclass(frozen=True)
class Search:
    """What to try: the axes beyond the reference, per device kind and family."""

    precisions: tuple[str, ...] = ()
    attention: tuple[str, ...] = ()
    schedulers: tuple[str, ...] = ()
    caches: tuple[str, ...] = CACHES
    compile_blocks: bool = False

    @classmethod
    def for_device(
        cls, kind: str, schedulers: tuple[str, ...] = (), compile_blocks: bool = False
    ) -> Search:
        """bf16 only where the hardware has bf16 arithmetic (a GPU, a ``+bf16`` CPU): on an
        AVX2 CPU it emulates bf16 and runs many times slower than fp32."""
        cuda = kind.startswith("cuda:")
        precisions = ("bf16",) if cuda or "+bf16" in kind else ()
        attention = ("_native_flash", "_native_efficient", "_native_cudnn", "flash", "sage")
        return cls(
            precisions=precisions,
            attention=attention if cuda else ("_native_math", "_native_flash"),
            schedulers=schedulers,
            compile_blocks=compile_blocks,
        )


@dataclass
class _Trial:
    choice: FamilyChoice
    option: str
    pipe: Any
    counter: CallCounter
    times: list[float] = field(default_factory=list)
    frames: Frames | None = None

    def video(self, render: Render, keep: bool) -> None:
        self.counter.reset()
        started = time.perf_counter()
        self.frames = render(self.pipe)
        if keep:
            self.times.append(time.perf_counter() - started)


def _rejected(choice: FamilyChoice, option: str, note: str) -> FamilyMeasurement:
    return FamilyMeasurement(
        choice=choice,
        option=option,
        seconds_per_video=math.inf,
        psnr_db=-math.inf,
        accepted=False,
        note=note,
    )


@dataclass
class Tuner:
    """One profile measurement: ``load`` a fresh pipeline, ``render`` one video with it."""

    load: Load
    render: Render
    steps: int
    floor_db: float = PSNR_FLOOR_DB
    rounds: int = ROUNDS
    budget_s: float = math.inf
    measured: list[FamilyMeasurement] = field(default_factory=list)
    mag_ratios: list[float] = field(default_factory=list)
    _reference: Frames | None = None
    _started: float = field(default_factory=time.monotonic)

    def _build(self, choice: FamilyChoice, option: str) -> _Trial | None:
        try:
            pipe = apply_choice(self.load(), choice, self.steps, self.mag_ratios)
            trial = _Trial(choice, option, pipe, CallCounter(denoiser(pipe)))
            trial.video(self.render, keep=False)  # warm-up: lazy kernels, compilation
        except Exception as error:
            note = f"cannot apply: {type(error).__name__}: {str(error)[:160]}"
            self.measured.append(_rejected(choice, option, note))
            return None
        return trial

    def _axis(self, best: _Trial, option: str, choices: list[FamilyChoice]) -> _Trial:
        """Time ``choices`` against ``best`` round-robin; the fastest accepted one wins."""
        if time.monotonic() - self._started > self.budget_s:
            for choice in choices:
                self.measured.append(_rejected(choice, option, "not measured: budget spent"))
            return best
        trials = [t for t in (self._build(c, option) for c in choices) if t is not None]
        if not trials:
            return best
        best.times.clear()
        for _ in range(self.rounds):
            for trial in [best, *trials]:
                trial.video(self.render, keep=True)
        assert self._reference is not None
        winner = best
        for trial in trials:
            assert trial.frames is not None
            quality = psnr(trial.frames, self._reference)
            faster = statistics.median(trial.times) < statistics.median(winner.times)
            accepted = quality >= self.floor_db
            if not accepted:
                note = f"below the {self.floor_db:g} dB floor"
            elif not faster:
                note = "within the floor, not faster"
            else:
                note, winner = "fastest so far", trial
            self.measured.append(_measure(trial, quality, accepted, note))
        return winner

    def run(self, search: Search) -> tuple[FamilyChoice, list[FamilyMeasurement]]:
        """The chosen choice and every measurement, the reference's first."""
        best = self._build(REFERENCE, "reference")
        if best is None:
            raise RuntimeError(f"the reference pipeline failed: {self.measured[-1].note}")
        for _ in range(self.rounds):
            best.video(self.render, keep=True)
        self._reference = best.frames
        self.measured.append(_measure(best, math.inf, True, "fp32 eager reference"))
        for option, values in (
            ("precision", search.precisions),
            ("attention", search.attention),
            ("scheduler", search.schedulers),
        ):
            if values:
                moved = [best.choice.model_copy(update={option: v}) for v in values]
                best = self._axis(best, option, moved)
        caches = list(search.caches)
        if "mag" in caches:
            try:
                plain = apply_choice(self.load(), best.choice, self.steps)
                self.mag_ratios = calibrate_mag_ratios(plain, self.steps, self.render)
            except Exception as error:
                caches.remove("mag")
                note = f"cannot calibrate: {type(error).__name__}: {str(error)[:160]}"
                mag = best.choice.model_copy(update={"cache": "mag"})
                self.measured.append(_rejected(mag, "cache", note))
        moved = [best.choice.model_copy(update={"cache": c}) for c in caches]
        best = self._axis(best, "cache", moved)
        if search.compile_blocks:
            compiled = best.choice.model_copy(update={"compile_blocks": True})
            best = self._axis(best, "compile", [compiled])
        return best.choice, self.measured


def _measure(trial: _Trial, quality: float, accepted: bool, note: str) -> FamilyMeasurement:
    return FamilyMeasurement(
        choice=trial.choice,
        option=trial.option,
        seconds_per_video=round(statistics.median(trial.times), 4),
        psnr_db=round(quality, 1) if math.isfinite(quality) else quality,
        denoiser_calls=trial.counter.denoiser_calls,
        block_linear_calls=trial.counter.block_linear_calls,
        accepted=accepted,
        note=note,
    )


def tune(
    load: Load,
    render: Render,
    *,
    kind: str,
    pipeline: str,
    weights: str,
    size: str,
    steps: int,
    search: Search,
    memory: MemoryPlan | None = None,
    budget_s: float = math.inf,
    floor_db: float = PSNR_FLOOR_DB,
    rounds: int = ROUNDS,
) -> FamilyProfile:
    """Measure and record the profile of one checkpoint on device kind ``kind``."""
    started = time.monotonic()
    tuner = Tuner(load, render, steps, floor_db, rounds, budget_s)
    chosen, measured = tuner.run(search)
    entry = FamilyProfile(
        device=kind,
        torch=torch.__version__,
        diffusers=diffusers.__version__,
        pipeline=pipeline,
        weights=weights,
        size=size,
        steps=steps,
        floor_db=floor_db,
        chosen=chosen,
        memory=memory or MemoryPlan(reason="resident: not checked"),
        mag_ratios=tuner.mag_ratios,
        measured=measured,
        note=f"measured in {time.monotonic() - started:.1f} s, {rounds} timed videos each",
    )
    log.info("families.profile %s: %s", pipeline, entry.summary())
    return entry
