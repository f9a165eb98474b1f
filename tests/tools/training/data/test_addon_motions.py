"""Add-on motions: the classifier reads ground-truth clips right, and an add-on run trains,
resumes and exports peft-named weights that workers read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tools.training.data.addon_motions import AddonMotion, addon_sample
from tools.training.data.scenes import heldout_sample
from tools.training.evaluation.motion_estimate import classify_with_addons
from workers.model.addons.store import TARGETS, read_addon


@pytest.mark.parametrize("motion", list(AddonMotion))
def test_ground_truth_addon_clips_are_classified_as_their_motion(motion: AddonMotion) -> None:
    for index in range(4):
        assert classify_with_addons(addon_sample(motion, index, heldout=True).video) == motion


@pytest.mark.parametrize("family", ["pan", "zoom", "rotate", "bounce", "sway", "static"])
def test_base_motions_keep_their_labels(family: str) -> None:
    for index in range(4):
        sample = heldout_sample(family, index)
        assert classify_with_addons(sample.video) == sample.motion.value


def test_an_addon_run_trains_resumes_and_exports(tmp_path: Path) -> None:
    from tools.training.addons.lora import AddonConfig, AddonTrainer

    torch.set_num_threads(1)
    config = AddonConfig(motion="shake", steps=2, batch_size=2)
    trainer = AddonTrainer(tmp_path / "run", config)
    trainer.train()
    assert trainer.state.step == 2
    resumed = AddonTrainer(tmp_path / "run")
    assert resumed.state.step == 2 and resumed.config == config
    out = resumed.export(tmp_path / "shake")
    addon = read_addon(out, "shake", "animfleet-small-distilled")
    assert set(addon.layers) == set(TARGETS)
