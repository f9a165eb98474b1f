"""The edge fill's run on the shared TrainingRun: a resumed run draws the batches and reaches
the weights an uninterrupted one does, and its export loads with from_pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tools.training.fill.train import FillConfig, FillRun
from workers.model.networks.edge_fill import EdgeFill

TINY = FillConfig(steps=4, batch=2, size=16, channels=4)


def _weights(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_a_resumed_fill_run_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    straight = FillRun(tmp_path / "straight", TINY)
    straight.train()
    interrupted = FillRun(tmp_path / "interrupted", TINY)
    interrupted._run(interrupted.loss, 2, TINY.steps, None, checkpoint_every=100)
    resumed = FillRun(tmp_path / "interrupted", TINY)
    assert resumed.state.step == 2
    resumed.train()
    assert resumed.state.step == straight.state.step == TINY.steps
    for ours, theirs in zip(_weights(resumed.model), _weights(straight.model), strict=True):
        assert torch.equal(ours, theirs)
    # The EMA copy follows the live weights and is what the export writes.
    for ours, theirs in zip(_weights(resumed.ema), _weights(straight.ema), strict=True):
        assert torch.equal(ours, theirs)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(_weights(resumed.ema), _weights(resumed.model), strict=True)
    )


def test_a_fill_export_loads_and_says_how_it_was_trained(tmp_path: Path) -> None:
    run = FillRun(tmp_path / "run", TINY)
    run.train()
    out = run.export(tmp_path / "fill")
    loaded = EdgeFill.from_pretrained(out)
    for ours, theirs in zip(_weights(loaded), _weights(run.ema), strict=True):  # type: ignore[arg-type]
        assert torch.equal(ours, theirs)
    summary = json.loads((out / "training.json").read_text())
    assert summary["trained_steps"] == TINY.steps and summary["channels"] == TINY.channels
    assert (out / "loss.png").exists() == (tmp_path / "run" / "loss.png").exists()
