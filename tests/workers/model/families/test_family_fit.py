"""The memory plan: resident when the weights fit, then fp8 storage, then group offloading
on a GPU, else a refusal that gives the figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from workers.model.families.fit import FitError, Footprint, footprint, plan_memory

GIB = 1 << 30


def test_weights_that_fit_stay_resident_and_small_frames_are_not_tiled() -> None:
    plan = plan_memory(Footprint(4 * GIB, 2 * GIB, GIB // 4), "cuda:0", 80 * GIB, 64 * GIB, 10)
    assert plan.storage == "resident" and not plan.vae_tiling
    assert "resident" in plan.reason


def test_large_frames_are_decoded_in_tiles() -> None:
    plan = plan_memory(Footprint(GIB, GIB, GIB // 8), "cuda:0", 80 * GIB, 64 * GIB, 97 * 512 * 768)
    assert plan.storage == "resident" and plan.vae_tiling


def test_fp8_storage_when_only_half_the_denoiser_fits() -> None:
    plan = plan_memory(Footprint(24 * GIB, 4 * GIB, GIB), "cuda:0", 24 * GIB, 64 * GIB, 10)
    assert plan.storage == "fp8_layerwise" and plan.vae_tiling


def test_group_offload_on_a_gpu_when_even_fp8_does_not_fit() -> None:
    plan = plan_memory(Footprint(60 * GIB, 4 * GIB, GIB), "cuda:0", 16 * GIB, 128 * GIB, 10)
    assert plan.storage == "group_offload"


def test_refused_with_the_figures_when_nothing_fits() -> None:
    with pytest.raises(
        FitError, match=r"cannot be served on cpu: weights 64\.0 GiB.*offloading needs a GPU"
    ):
        plan_memory(Footprint(60 * GIB, 4 * GIB, GIB), "cpu", 16 * GIB, 16 * GIB, 10)
    with pytest.raises(FitError, match="cuda:0"):
        plan_memory(Footprint(60 * GIB, 4 * GIB, 20 * GIB), "cuda:0", 16 * GIB, 128 * GIB, 10)


def test_footprint_counts_parameters_from_the_headers_at_the_serving_dtype(tmp_path: Path) -> None:
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    save_file(
        {
            "transformer_blocks.0.w": torch.zeros(10, 10, dtype=torch.float16),
            "transformer_blocks.1.w": torch.zeros(10, 20, dtype=torch.float16),
            "proj_out.weight": torch.zeros(5, dtype=torch.float16),
        },
        str(tmp_path / "transformer" / "model.safetensors"),
    )
    save_file({"conv.weight": torch.zeros(7)}, str(tmp_path / "vae" / "model.safetensors"))
    size = footprint(tmp_path, "transformer", dtype_bytes=4)
    assert size == Footprint(denoiser=(100 + 200 + 5) * 4, other=7 * 4, largest_block=200 * 4)
