"""Real photographs that ship inside Python packages, by name, as (3, H, W) tensors in [-1, 1].

scikit-image's (``skimage.data``) are used for training and for held-out evaluation; the
sample photographs of scikit-learn (``china``, ``flower``) and matplotlib (``grace_hopper``)
are never trained on: :data:`EVAL_ONLY` is evaluation-only by rule. Nothing is downloaded: all
of them are files inside the installed packages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

EVAL_ONLY = ("china", "flower", "grace_hopper")


def _array(name: str) -> np.ndarray:
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        return np.asarray(load_sample_image(f"{name}.jpg"))
    if name == "grace_hopper":
        import matplotlib

        path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    import skimage.data

    loaded = getattr(skimage.data, name)()
    return np.asarray(loaded[0] if isinstance(loaded, tuple) else loaded)


def load_photo(name: str) -> torch.Tensor:
    """The photograph ``name`` as (3, H, W) float in [-1, 1]; grey ones get three channels."""
    array = _array(name)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    pixels = torch.from_numpy(np.array(array[..., :3])).permute(2, 0, 1)
    return pixels.float() / 127.5 - 1


def photo_uint8(name: str) -> np.ndarray:
    """The photograph ``name`` as (H, W, 3) uint8."""
    pixels = load_photo(name)
    out: np.ndarray = ((pixels + 1) * 127.5).round().clamp(0, 255).byte().permute(1, 2, 0).numpy()
    return out
