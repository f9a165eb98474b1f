"""Saved models name their components by module path: a model saved now names the networks'
package, and one saved before the networks moved there still loads."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.workers.model.tiny import tiny_student
from workers.model.networks.motion_unet import MotionUNet
from workers.model.networks.pixel_codec import PixelCodec
from workers.model.pipelines.animation import AnimationPipeline


def test_a_saved_model_names_the_networks_package(tmp_path: Path) -> None:
    index = json.loads((tiny_student(tmp_path / "m") / "model_index.json").read_text())
    assert index["unet"] == ["workers.model.networks.motion_unet", "MotionUNet"]
    assert index["vae"] == ["workers.model.networks.pixel_codec", "PixelCodec"]


def test_a_model_saved_under_the_old_module_paths_still_loads(tmp_path: Path) -> None:
    model = tiny_student(tmp_path / "m")
    path = model / "model_index.json"
    index = json.loads(path.read_text())
    index["unet"] = ["workers.model.motion_unet", "MotionUNet"]
    index["vae"] = ["workers.model.pixel_codec", "PixelCodec"]
    path.write_text(json.dumps(index))
    pipe = AnimationPipeline.from_pretrained(model)
    assert isinstance(pipe.unet, MotionUNet) and isinstance(pipe.vae, PixelCodec)
    fresh = AnimationPipeline.from_pretrained(tiny_student(tmp_path / "again"))
    for ours, theirs in zip(pipe.unet.parameters(), fresh.unet.parameters(), strict=True):
        assert torch.equal(ours, theirs)
