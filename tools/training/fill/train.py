"""``animfleet train-fill``: train the edge fill
(:class:`workers.model.networks.edge_fill.EdgeFill`).

Resumable: the run directory holds the checkpoint (weights, EMA copy, optimiser, progress) and
the loss curve; running the same command again continues where it stopped. The loss is the
mean squared error over the pixels that came into view (and whose truth the picture has).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tools.training.fill.data import FillBatch, FillData
from tools.training.loop import CHECKPOINT, RunState, run_steps, update_ema, write_checkpoint
from workers.model.networks.edge_fill import EdgeFill


@dataclass(frozen=True)
class FillConfig:
    steps: int = 1500
    batch: int = 16
    size: int = 64
    channels: int = 16
    learning_rate: float = 2e-3
    ema_decay: float = 0.995
    seed: int = 0


def masked_mse(out: torch.Tensor, batch: FillBatch) -> torch.Tensor:
    """Mean squared error over the unknown, valid pixels (all three channels)."""
    weight = batch.unknown * batch.valid
    squared = ((out - batch.truth) ** 2 * weight).sum()
    return squared / (3 * weight.sum()).clamp(min=1)


class FillRun:
    """The resumable training run in ``run_dir``."""

    def __init__(self, run_dir: Path, config: FillConfig) -> None:
        self.run_dir = run_dir
        saved = run_dir / "config.json"
        if saved.exists():
            found = FillConfig(**json.loads(saved.read_text()))
            if found != config:
                raise ValueError(f"{run_dir} was started with another config: {asdict(found)}")
        self.config = config
        torch.manual_seed(config.seed)
        self.model = EdgeFill(channels=config.channels)
        self.ema = EdgeFill(channels=config.channels)
        self.ema.load_state_dict(self.model.state_dict())
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate)
        self.state = RunState()
        self.data = FillData(config.size)
        self.generator = torch.Generator().manual_seed(config.seed)
        if (run_dir / CHECKPOINT).exists():
            payload = torch.load(run_dir / CHECKPOINT, weights_only=False)
            self.model.load_state_dict(payload["model"])
            self.ema.load_state_dict(payload["ema"])
            self.optimizer.load_state_dict(payload["optimizer"])
            self.generator.set_state(payload["generator"])
            state = payload["state"]
            self.state = RunState(
                step=state["step"],
                seconds=state["seconds"],
                losses=[(int(s), float(v)) for s, v in state["losses"]],
            )

    def _learning_rate(self, step: int) -> float:
        warmup = 100
        if step < warmup:
            return self.config.learning_rate * (step + 1) / warmup
        progress = (step - warmup) / max(self.config.steps - warmup, 1)
        return self.config.learning_rate * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    def train_step(self) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = self._learning_rate(self.state.step)
        batch = self.data.batch(self.generator, self.config.batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss = masked_mse(self.model(batch.frames, batch.unknown), batch)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        update_ema([self.model], [self.ema], self.state.step, self.config.ema_decay)
        self.state.step += 1
        return float(loss.item())

    def save(self) -> None:
        from tools.training.plots import plot_loss

        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(asdict(self.config), indent=2))
        payload = {
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "state": asdict(self.state),
        }
        write_checkpoint(self.run_dir, payload)
        if self.state.losses:
            plot_loss(
                self.state.losses,
                self.run_dir / "loss.png",
                ylabel="MSE on pixels coming into view",
                title="animfleet-edge-fill training loss",
            )

    def train(self, minutes: float | None = None) -> None:
        run_steps(
            self.state,
            self.config.steps,
            self.train_step,
            self.save,
            total=self.config.steps,
            desc="train-fill",
            minutes=minutes,
            checkpoint_every=100,
            loss_format=".5f",
        )

    def export(self, directory: Path) -> Path:
        """The EMA weights as a ``from_pretrained`` directory, with the config and loss curve."""
        self.ema.save_pretrained(directory, safe_serialization=True)
        summary = {**asdict(self.config), "trained_steps": self.state.step}
        summary["train_seconds"] = round(self.state.seconds, 1)
        (directory / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
        if (self.run_dir / "loss.png").exists():
            shutil.copyfile(self.run_dir / "loss.png", directory / "loss.png")
        return directory
