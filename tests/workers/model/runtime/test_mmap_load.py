"""The worker loads a model's safetensors memory-mapped: its weights are the file's pages, read
from the page cache when first used, not copied into the process at load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workers.model.pipelines.build import init_model
from workers.model.runtime.loading import Variant, load_pipeline


def _mappings(path: Path) -> list[tuple[int, int]]:
    """The address ranges of this process that map ``path`` (``/proc/self/maps``)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(path):
            low, high = (int(bound, 16) for bound in fields[0].split("-"))
            ranges.append((low, high))
    return ranges


def _mapped_share(module: torch.nn.Module, weights: Path) -> float:
    """The share of ``module``'s parameter bytes that lie inside a mapping of ``weights``."""
    ranges = _mappings(weights.resolve())
    total = inside = 0
    for parameter in module.parameters():
        size = parameter.numel() * parameter.element_size()
        start = parameter.data_ptr()
        total += size
        if any(low <= start and start + size <= high for low, high in ranges):
            inside += size
    return inside / total


@pytest.mark.parametrize("svd", [False, True], ids=["animation", "svd"])
def test_weights_stay_mapped_from_their_files(svd: bool, tmp_path: Path) -> None:
    model_dir = init_model(tmp_path / "model", svd=svd)
    pipe = load_pipeline(model_dir, Variant(name="mapped", precision="fp32"))
    weights = model_dir / "unet" / "diffusion_pytorch_model.safetensors"
    assert weights.is_file()
    # Read into memory first (``disable_mmap=True``) none would be.
    assert _mapped_share(pipe.unet, weights) == 1.0
