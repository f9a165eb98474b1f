"""Frame metrics against ground truth: PSNR and SSIM on uint8 RGB frames."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

Frames = npt.NDArray[np.uint8]  # (T, H, W, 3)


def psnr(frames: Frames, truth: Frames) -> float:
    """Peak signal-to-noise ratio in dB over all given frames (255 peak)."""
    error = np.mean((frames.astype(np.float64) - truth.astype(np.float64)) ** 2)
    return 99.0 if error == 0 else float(10 * math.log10(255.0**2 / error))


def _gaussian_window(size: int = 7, sigma: float = 1.5) -> torch.Tensor:
    axis = torch.arange(size, dtype=torch.float64) - size // 2
    kernel = torch.exp(-(axis**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    return (kernel[:, None] * kernel[None, :]).view(1, 1, size, size)


def ssim(frames: Frames, truth: Frames) -> float:
    """Mean SSIM (Wang et al. 2004; 7x7 Gaussian window, sigma 1.5) over frames and channels.

    The window is smaller than the usual 11x11 because our frames are only 32-64 pixels wide.
    """
    a = torch.from_numpy(frames).double().permute(0, 3, 1, 2).flatten(0, 1)[:, None]
    b = torch.from_numpy(truth).double().permute(0, 3, 1, 2).flatten(0, 1)[:, None]
    window = _gaussian_window()
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu_a, mu_b = F.conv2d(a, window), F.conv2d(b, window)
    var_a = F.conv2d(a * a, window) - mu_a**2
    var_b = F.conv2d(b * b, window) - mu_b**2
    cov = F.conv2d(a * b, window) - mu_a * mu_b
    value = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / (
        (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    )
    return float(value.mean())


def to_uint8(video: torch.Tensor) -> Frames:
    """(F, 3, H, W) in [-1, 1] to (F, H, W, 3) uint8."""
    pixels = ((video.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    result: Frames = pixels.permute(0, 2, 3, 1).numpy()
    return result
