from pathlib import Path

import numpy as np
import pytest
import torch

from tools.training.base.train import TrainConfig, Trainer
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams

TINY = TrainConfig(batch_size=2, size=16, warmup_steps=2, block_out_channels=(8, 16))


def _weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.ema.unet.parameters()]


def test_resumed_training_equals_uninterrupted(tmp_path: Path) -> None:
    straight = Trainer(tmp_path / "straight", TINY)
    straight.run(3, checkpoint_every=100)
    interrupted = Trainer(tmp_path / "interrupted", TINY)
    interrupted.run(2, checkpoint_every=100)
    resumed = Trainer(tmp_path / "interrupted")
    assert resumed.state.step == 2
    resumed.run(3)
    assert all(
        torch.equal(a, b) for a, b in zip(_weights(straight), _weights(resumed), strict=True)
    )
    untrained = _weights(Trainer(tmp_path / "fresh", TINY))
    assert not all(torch.equal(a, b) for a, b in zip(_weights(straight), untrained, strict=True))


def test_a_run_refuses_another_config(tmp_path: Path) -> None:
    Trainer(tmp_path, TINY).save()
    with pytest.raises(ValueError, match="another config"):
        Trainer(tmp_path, TrainConfig(batch_size=3, size=16, block_out_channels=(8, 16)))


def test_export_loads_with_from_pretrained_and_animates(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path / "run", TINY)
    trainer.run(1)
    trainer.export(tmp_path / "model")
    pipe = AnimationPipeline.from_pretrained(str(tmp_path / "model"))
    image = np.random.default_rng(0).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    frames = pipe(image, GenerationParams("zoom in", 4, 8, num_inference_steps=2))
    assert frames.shape == (4, 16, 24, 3) and frames.dtype == np.uint8
    assert pipe.scheduler.config.prediction_type == "sample"


def test_a_decay_can_be_added_ahead_of_the_run_but_not_behind_it(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path, TINY)
    trainer.run(2)
    with pytest.raises(ValueError, match="before the run's step"):
        trainer.schedule_decay(1, 10)
    trainer.schedule_decay(4, 10)
    assert Trainer(tmp_path).config.decay_from == 4
    assert trainer._learning_rate(3) == TINY.learning_rate
    assert trainer._learning_rate(14) == pytest.approx(TINY.learning_rate / 10)
