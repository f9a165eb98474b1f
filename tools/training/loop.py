"""What every training run here shares: the resumable step loop and the EMA update."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

import torch
from tqdm import tqdm

LOSS_WINDOW = 25  # steps averaged into one point of the loss curve


class RunState(Protocol):
    step: int
    seconds: float
    losses: list[tuple[int, float]]


def run_steps(
    state: RunState,
    until: int,
    train_step: Callable[[], float],
    save: Callable[[], None],
    *,
    total: int,
    desc: str,
    minutes: float | None = None,
    checkpoint_every: int = 50,
    loss_format: str = ".4f",
) -> None:
    """Call ``train_step`` (which advances ``state.step``) until ``state.step == until`` or
    ``minutes`` of this stretch; record the loss curve, checkpoint every ``checkpoint_every``
    steps and at the end."""
    started = time.monotonic()
    window: list[float] = []
    with tqdm(total=total, initial=state.step, desc=desc, unit="step") as bar:
        while state.step < until:
            tick = time.monotonic()
            window.append(train_step())
            state.seconds += time.monotonic() - tick
            bar.update(1)
            if len(window) == LOSS_WINDOW:
                state.losses.append((state.step, sum(window) / len(window)))
                bar.set_postfix(loss=format(state.losses[-1][1], loss_format))
                window = []
            out_of_time = minutes is not None and time.monotonic() - started > minutes * 60
            if state.step % checkpoint_every == 0 or out_of_time:
                save()
            if out_of_time:
                break
    save()


def update_ema(
    live: Iterable[torch.nn.Module], ema: Iterable[torch.nn.Module], step: int, decay: float
) -> None:
    """Move ``ema``'s weights towards ``live``'s. The decay warms up: early on the average
    would mostly remember the initialisation."""
    rate = 1 - min(decay, (1 + step) / (10 + step))
    with torch.no_grad():
        for module, average in zip(live, ema, strict=True):
            for p, q in zip(module.parameters(), average.parameters(), strict=True):
                q.lerp_(p, rate)
