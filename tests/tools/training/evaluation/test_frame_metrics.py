import numpy as np
import torch

from tools.training.data.motions import Motion
from tools.training.evaluation.frame_metrics import psnr, ssim, to_uint8
from tools.training.evaluation.motion_estimate import classify


def test_psnr_and_ssim_rank_closer_frames_higher() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    near = np.clip(truth.astype(int) + rng.integers(-5, 6, truth.shape), 0, 255).astype(np.uint8)
    far = rng.integers(0, 256, truth.shape, dtype=np.uint8)
    assert psnr(truth, truth) == 99.0 and abs(ssim(truth, truth) - 1.0) < 1e-9
    assert psnr(near, truth) > 30 > psnr(far, truth)
    assert ssim(near, truth) > 0.9 > ssim(far, truth)


def test_a_clip_that_does_not_move_is_static() -> None:
    frame = torch.rand(1, 3, 32, 32) * 2 - 1
    assert classify(frame.repeat(8, 1, 1, 1)) is Motion.STATIC
    assert to_uint8(frame).shape == (1, 32, 32, 3)
