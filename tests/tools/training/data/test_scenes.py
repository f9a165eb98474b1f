import pytest
import torch

from tools.training.data.motions import Motion
from tools.training.data.scenes import (
    FAMILIES,
    flow_field,
    heldout_sample,
    training_batch,
    training_sample,
)
from tools.training.evaluation.motion_estimate import classify
from workers.model.networks.motion_unet import warp


def test_samples_are_deterministic_by_index() -> None:
    a, b = training_sample(5), training_sample(5)
    assert torch.equal(a.video, b.video) and a.prompt == b.prompt
    assert not torch.equal(training_sample(6).video, a.video)
    videos, prompts, flows = training_batch(4, 3)
    assert torch.equal(videos[1], a.video) and prompts[1] == a.prompt
    assert videos.shape == (3, 8, 3, 32, 32) and flows.shape == (3, 8, 2, 32, 32)


def test_heldout_split_is_balanced_and_separate_from_training() -> None:
    zooms = [heldout_sample("zoom", i) for i in range(4)]
    assert [s.motion for s in zooms] == [Motion.ZOOM_IN, Motion.ZOOM_OUT] * 2
    training = {training_sample(i).video[0].numpy().tobytes() for i in range(50)}
    assert all(s.video[0].numpy().tobytes() not in training for s in zooms)
    with pytest.raises(ValueError, match="family must be one of"):
        heldout_sample("wobble", 0)


def test_frames_are_on_uint8_levels_and_frame_zero_is_the_image() -> None:
    sample = heldout_sample("pan", 0, size=16)
    levels = (sample.video + 1) * 127.5
    assert torch.allclose(levels, levels.round(), atol=1e-4)
    assert torch.equal(sample.image, sample.video[0])


@pytest.mark.parametrize("family", FAMILIES)
def test_ground_truth_motion_is_classified_as_its_prompt(family: str) -> None:
    # Validates the generator and the motion classifier against each other.
    for index in range(4):
        sample = heldout_sample(family, index)
        assert classify(sample.video) is sample.motion, sample.prompt


def test_flow_field_warps_the_first_frame_onto_every_frame() -> None:
    for family in ("pan", "zoom", "rotate"):
        sample = heldout_sample(family, 1)
        warped = warp(sample.video[:1], flow_field(sample, 32), 8)
        inner = (slice(None), slice(None), slice(6, -6), slice(6, -6))
        error = (warped - sample.video)[inner].abs().mean()
        copy_error = (sample.video[:1] - sample.video)[inner].abs().mean()
        assert error < 0.03 and error < copy_error / 4, sample.prompt
