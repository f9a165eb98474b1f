"""What every training run here shares: the resumable run (weights, EMA copy, optimiser,
checkpoint, export), its step loop and the EMA update. The base model, the student, the slimmed
arms, the add-ons and the edge fill all train through :class:`TrainingRun`."""

from __future__ import annotations

import json
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import torch
from tqdm import tqdm

LOSS_WINDOW = 25  # steps averaged into one point of the loss curve
CHECKPOINT = "checkpoint.pt"


@dataclass
class RunState:
    """Progress of a run, saved in its checkpoint."""

    step: int = 0
    seconds: float = 0.0
    losses: list[tuple[int, float]] = field(default_factory=list)


class RunConfig(Protocol):
    """What the shared run needs of a config: a dataclass with these hyper-parameters."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def learning_rate(self) -> float: ...
    @property
    def ema_decay(self) -> float: ...


C = TypeVar("C", bound=RunConfig)
S = TypeVar("S", bound=RunState)


def run_config(run_dir: Path, config: C | None, config_type: type[C]) -> C:
    """The config saved in ``run_dir`` if any (``config``, when given, must equal it), else
    ``config`` or the defaults. JSON has no tuples: every list field is read back as one."""
    saved = run_dir / "config.json"
    if not saved.exists():
        return config or config_type()
    loaded = json.loads(saved.read_text())
    found = config_type(**{k: tuple(v) if isinstance(v, list) else v for k, v in loaded.items()})
    if config is not None and config != found:
        raise ValueError(f"{run_dir} was started with another config: {asdict(found)}")
    return found


class Pretrained(Protocol):
    """What the default export needs of the exported weights: diffusers' ``save_pretrained``."""

    def save_pretrained(self, save_directory: Path, *, safe_serialization: bool) -> None: ...


M = TypeVar("M", bound=Pretrained)  # what a run holds: a pipeline or one module


class TrainingRun(ABC, Generic[C, S, M]):
    """A resumable run in one directory: the model being trained, its EMA copy (what is
    exported; a run without one exports the live weights), the AdamW optimiser, and the
    checkpoint that holds them with the progress.

    Subclasses choose the trained modules, the learning-rate schedule, the loss (through
    :meth:`_run`) and what is written beside the exported weights; a run whose weights are
    not whole modules (a LoRA's) or live outside the model (a branch's) overrides how they
    are gathered, checkpointed and exported.
    """

    desc = "train"  # progress bar label
    loss_format = ".4f"
    plot_labels: ClassVar[dict[str, str]] = {}  # ylabel/title of loss.png, else plot_loss's
    weights_key = "model"  # checkpoint key of the live weights
    # Store the one trained module's state dict as is, not in a list (the distiller's layout).
    bare_weights = False

    def __init__(
        self,
        run_dir: Path,
        config: C,
        model: M,
        ema: M | None,
        state: S,
        weight_decay: float,
    ) -> None:
        self.run_dir = run_dir
        self.config = config
        self.model = model
        self.ema = ema
        if ema is not None:  # the EMA starts as the live weights, whatever the two builds drew
            for module, average in zip(self._trained(model), self._trained(ema), strict=True):
                average.load_state_dict(module.state_dict())
        self.params = self._parameters()
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.learning_rate, weight_decay=weight_decay
        )
        self.state = state
        if (run_dir / CHECKPOINT).exists():
            self._load()

    @abstractmethod
    def _trained(self, model: M) -> list[torch.nn.Module]:
        """The modules of ``model`` that the optimiser updates (and the EMA follows)."""

    @abstractmethod
    def _learning_rate(self, step: int) -> float: ...

    @abstractmethod
    def _describe(self, directory: Path) -> None:
        """Write what the export carries besides the weights (the run's summary)."""

    @property
    def exported(self) -> M:
        """The weights an export writes: the EMA copy, else the live ones."""
        return self.model if self.ema is None else self.ema

    def _parameters(self) -> list[torch.nn.Parameter]:
        """What the optimiser updates: every parameter of the trained modules."""
        return [p for module in self._trained(self.model) for p in module.parameters()]

    def train_step(self, loss: Callable[[int], torch.Tensor]) -> float:
        """One optimiser step on ``loss(step)``, then the EMA update; returns the loss."""
        step = self.state.step
        for group in self.optimizer.param_groups:
            group["lr"] = self._learning_rate(step)
        self.optimizer.zero_grad(set_to_none=True)
        value = loss(step)
        value.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        if self.ema is not None:
            live, average = self._trained(self.model), self._trained(self.ema)
            update_ema(live, average, step, self.config.ema_decay)
        self.state.step += 1
        return value.item()

    def _run(
        self,
        loss: Callable[[int], torch.Tensor],
        until: int,
        total: int,
        minutes: float | None,
        checkpoint_every: int,
    ) -> None:
        run_steps(
            self.state,
            until,
            lambda: self.train_step(loss),
            self.save,
            total=total,
            desc=self.desc,
            minutes=minutes,
            checkpoint_every=checkpoint_every,
            loss_format=self.loss_format,
        )

    def _loss_plot(self) -> dict[str, str]:
        """The ylabel and title of ``loss.png``."""
        return self.plot_labels

    def save(self) -> None:
        """Write the checkpoint atomically (a kill mid-write leaves the previous one)."""
        from tools.training.plots import plot_loss  # matplotlib only when a run saves

        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(asdict(self.config), indent=2))
        payload: dict[str, Any] = {
            **self._checkpoint(),
            "optimizer": self.optimizer.state_dict(),
            "state": asdict(self.state),
        }
        write_checkpoint(self.run_dir, payload)
        if self.state.losses:
            plot_loss(self.state.losses, self.run_dir / "loss.png", **self._loss_plot())

    def _checkpoint(self) -> dict[str, Any]:
        """The checkpoint's entries besides the optimiser and the progress: the weights."""
        payload = {self.weights_key: self._pack(self.model)}
        if self.ema is not None:
            payload["ema"] = self._pack(self.ema)
        return payload

    def _restore(self, payload: dict[str, Any]) -> None:
        """Load what :meth:`_checkpoint` saved."""
        self._unpack(self.model, payload[self.weights_key])
        if self.ema is not None:
            self._unpack(self.ema, payload["ema"])

    def _pack(self, model: M) -> Any:
        weights = [module.state_dict() for module in self._trained(model)]
        return weights[0] if self.bare_weights else weights

    def _unpack(self, model: M, saved: Any) -> None:
        for module, weights in zip(
            self._trained(model), [saved] if self.bare_weights else saved, strict=True
        ):
            module.load_state_dict(weights)

    def _load(self) -> None:
        payload = torch.load(self.run_dir / CHECKPOINT, weights_only=False)
        self._restore(payload)
        self.optimizer.load_state_dict(payload["optimizer"])
        saved_state = payload["state"]
        values = {f.name: saved_state[f.name] for f in fields(self.state)}
        values["losses"] = [(int(s), float(v)) for s, v in saved_state["losses"]]
        self.state = type(self.state)(**values)

    def export(self, directory: Path) -> Path:
        """Write the exported weights (:meth:`_write_weights`), the run's summary and its loss
        curve into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        self._write_weights(directory)
        self._describe(directory)
        if (self.run_dir / "loss.png").exists():
            shutil.copyfile(self.run_dir / "loss.png", directory / "loss.png")
        return directory

    def _write_weights(self, directory: Path) -> None:
        """The exported weights as a ``from_pretrained`` directory."""
        self.exported.save_pretrained(directory, safe_serialization=True)


def write_checkpoint(run_dir: Path, payload: dict[str, Any]) -> None:
    """Save ``payload`` as the run's checkpoint atomically (a kill mid-write leaves the
    previous one)."""
    tmp = run_dir / (CHECKPOINT + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, run_dir / CHECKPOINT)


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
