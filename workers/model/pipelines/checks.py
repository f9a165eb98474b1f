"""What a serving measurement compares and is valid for: PSNR of two videos against a floor,
and the hash of the denoiser's weights (shared by the built-in model's and the families'
serving profiles)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt

PSNR_FLOOR_DB = 40.0

__all__ = ["PSNR_FLOOR_DB", "psnr", "weights_hash"]


def weights_hash(model_dir: Path, part: str = "unet") -> str:
    """sha256 (16 hex digits) of the denoiser's (``part``: ``unet``, a family's
    ``transformer``) config and weights: what a measurement or an artifact is valid for."""
    digest = hashlib.sha256()
    folder = model_dir / part
    for path in sorted(folder.glob("*.json")) + sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def psnr(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8]) -> float:
    """PSNR in dB of two uint8 videos; inf when identical."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else float(10 * np.log10(255.0**2 / mse))
