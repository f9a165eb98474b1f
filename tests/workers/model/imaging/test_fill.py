"""The fill of unknown pixels: nearest known pixels found exactly enough, known pixels kept,
no value outside the photograph's own range, grey stays grey, and on a real photograph it
beats border replication against the real surroundings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tools.training.data.photos import photo_uint8
from tools.training.evaluation.fill_eval import border, masks
from workers.model.imaging.fill import fill_unknown, nearest_known


def _photo(side: int = 128) -> np.ndarray:
    """A training photograph's centre, small enough to keep the test fast."""
    photo = photo_uint8("astronaut")
    top = (photo.shape[0] - 2 * side) // 2
    return np.ascontiguousarray(photo[top : top + 2 * side : 2, top : top + 2 * side : 2])


def test_nearest_known_is_the_nearest_or_very_nearly() -> None:
    rng = np.random.default_rng(0)
    known = rng.random((40, 56)) < 0.02
    rows, cols = nearest_known(torch.from_numpy(known))
    ky, kx = np.nonzero(known)
    yy, xx = np.mgrid[:40, :56]
    exact = np.sqrt(((yy[..., None] - ky) ** 2 + (xx[..., None] - kx) ** 2).min(axis=-1))
    found = np.sqrt((rows.numpy() - yy) ** 2 + (cols.numpy() - xx) ** 2)
    assert known[rows.numpy(), cols.numpy()].all()
    assert (found <= exact + 1.5).all() and (found - exact).mean() < 0.05


@pytest.mark.parametrize("kind", ["pan", "zoom", "holes"])
def test_the_fill_keeps_known_pixels_and_the_photographs_range(kind: str) -> None:
    image = _photo()
    for which, unknown in masks(128, seed=1):
        if which != kind:
            continue
        filled = fill_unknown(image, ~unknown)
        assert np.array_equal(filled[~unknown], image[~unknown])
        for channel in range(3):
            values = image[..., channel]
            assert values.min() <= filled[..., channel].min()
            assert filled[..., channel].max() <= values.max()


def test_a_grey_image_is_filled_grey() -> None:
    grey = _photo().mean(axis=-1).astype(np.uint8)
    image = np.repeat(grey[..., None], 3, axis=-1)
    unknown = np.zeros((128, 128), dtype=bool)
    unknown[:, :40] = True
    filled = fill_unknown(image, ~unknown)
    assert (filled.max(axis=-1) == filled.min(axis=-1)).all()


def test_the_fill_beats_border_replication_on_a_photograph() -> None:
    image = _photo()

    def psnr(candidate: np.ndarray, unknown: np.ndarray) -> float:
        error = ((candidate[unknown].astype(float) - image[unknown]) ** 2).mean()
        return float(10 * np.log10(255**2 / error))

    for _, unknown in masks(128, seed=2):
        fill, replicated = fill_unknown(image, ~unknown), border(image, ~unknown)
        assert psnr(fill, unknown) > psnr(replicated, unknown)


def test_refuses_a_mask_without_known_pixels() -> None:
    with pytest.raises(ValueError, match="no known pixel"):
        fill_unknown(np.zeros((8, 8, 3), dtype=np.uint8), np.zeros((8, 8), dtype=bool))
