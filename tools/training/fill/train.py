"""``animfleet train-fill``: train the edge fill
(:class:`workers.model.networks.edge_fill.EdgeFill`).

Resumable: the run directory holds the checkpoint (weights, EMA copy, optimiser, progress) and
the loss curve; running the same command again continues where it stopped. The loss is the
mean squared error over the pixels that came into view (and whose truth the picture has).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from tools.training.fill.data import FillBatch, FillData
from tools.training.loop import RunState, TrainingRun, run_config
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


class FillRun(TrainingRun[FillConfig, RunState, EdgeFill]):
    """The resumable training run in ``run_dir``; its checkpoint also holds the data's
    generator, so a resumed run draws the batches an uninterrupted one would."""

    desc = "train-fill"
    loss_format = ".5f"
    plot_labels: ClassVar[dict[str, str]] = {
        "ylabel": "MSE on pixels coming into view",
        "title": "animfleet-edge-fill training loss",
    }
    bare_weights = True

    def __init__(self, run_dir: Path, config: FillConfig) -> None:
        config = run_config(run_dir, config, FillConfig)
        torch.manual_seed(config.seed)
        model = EdgeFill(channels=config.channels)
        ema = EdgeFill(channels=config.channels)
        self.data = FillData(config.size)
        self.generator = torch.Generator().manual_seed(config.seed)
        super().__init__(run_dir, config, model, ema, RunState(), weight_decay=0.01)

    def _trained(self, model: EdgeFill) -> list[torch.nn.Module]:
        return [model]

    def _checkpoint(self) -> dict[str, Any]:
        return {**super()._checkpoint(), "generator": self.generator.get_state()}

    def _restore(self, payload: dict[str, Any]) -> None:
        super()._restore(payload)
        self.generator.set_state(payload["generator"])

    def _learning_rate(self, step: int) -> float:
        warmup = 100
        if step < warmup:
            return self.config.learning_rate * (step + 1) / warmup
        progress = (step - warmup) / max(self.config.steps - warmup, 1)
        return self.config.learning_rate * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    def loss(self, step: int) -> torch.Tensor:
        """The next batch's loss (drawn from the run's generator, which the step advanced)."""
        batch = self.data.batch(self.generator, self.config.batch)
        return masked_mse(self.model(batch.frames, batch.unknown), batch)

    def train(self, minutes: float | None = None) -> None:
        self._run(self.loss, self.config.steps, self.config.steps, minutes, checkpoint_every=100)

    def _describe(self, directory: Path) -> None:
        """``training.json``: the config, the steps trained and how long they took."""
        summary = {**asdict(self.config), "trained_steps": self.state.step}
        summary["train_seconds"] = round(self.state.seconds, 1)
        (directory / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
