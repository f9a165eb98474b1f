"""The mask fitted like the image: the dispatcher's PIL-only coverage counts what the worker's
threshold animates."""

from __future__ import annotations

import numpy as np
from PIL import Image

from animfleet.masks import THRESHOLD, coverage, fitted_mask


def test_coverage_is_the_share_of_fitted_pixels_at_or_above_the_threshold() -> None:
    rng = np.random.default_rng(0)
    grey = Image.fromarray(rng.integers(0, 256, (90, 160), dtype=np.uint8), mode="L")
    for width, height in ((64, 36), (32, 32), (17, 40)):
        fitted = np.asarray(fitted_mask(grey, width, height))
        assert fitted.shape == (height, width)
        assert coverage(grey, width, height) == float((fitted >= THRESHOLD).mean())
    assert coverage(Image.new("L", (64, 64), THRESHOLD - 1), 64, 64) == 0.0
    assert coverage(Image.new("L", (64, 64), THRESHOLD), 32, 32) == 1.0
