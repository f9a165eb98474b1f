"""A tiny trained teacher and a tiny distillation config, for distillation and comparison."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import pytest

from tools.training.base.train import TrainConfig, Trainer
from tools.training.student.distill import DistillConfig


@pytest.fixture(scope="session")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("teacher")
    trainer = Trainer(root / "run", TrainConfig(batch_size=2, size=16, block_out_channels=(8, 16)))
    trainer.run(2)
    return trainer.export(root / "model")


Config = TypeVar("Config", bound=DistillConfig)


def tiny(teacher: Path, kind: type[Config] = DistillConfig, **changes: object) -> Config:  # type: ignore[assignment]
    """A distillation (or ``kind``, a subclass) of seconds on ``teacher``."""
    config = kind(
        teacher=str(teacher),
        teacher_steps=4,
        student_steps=2,
        trajectories=4,
        shard_size=2,
        steps=3,
        batch_size=2,
        warmup_steps=1,
        size=16,
        num_frames=4,
    )
    for key, value in changes.items():
        setattr(config, key, value)
    return config
