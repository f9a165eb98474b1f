"""diffusers' step caches on a tiny LTX-Video transformer: each cuts the block work it claims
to, and the counter sees exactly the work done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workers.model.families.profile_tiny import (
    STEPS,
    load_tiny_ltx,
    render_tiny_ltx,
)
from workers.model.families.caching import (
    CallCounter,
    calibrate_mag_ratios,
    denoiser,
    enable_cache,
    repeated_blocks,
    supports_cache,
)


@pytest.fixture(scope="module")
def uncached(ltx: Path) -> tuple[int, int]:
    return _calls(load_tiny_ltx(ltx))


def _calls(pipe: Any) -> tuple[int, int]:
    counter = CallCounter(denoiser(pipe))
    render_tiny_ltx(pipe)
    counter.remove()
    return counter.denoiser_calls, counter.block_linear_calls


def test_counter_counts_every_block_linear_once_per_call(ltx: Path) -> None:
    pipe = load_tiny_ltx(ltx)
    blocks = repeated_blocks(denoiser(pipe))
    linears = sum(isinstance(m, torch.nn.Linear) for b in blocks for m in b.modules())
    calls, block_calls = _calls(pipe)
    assert len(blocks) == 4
    assert calls == STEPS  # LTX batches the conditional and unconditional passes
    assert block_calls == calls * linears


@pytest.mark.parametrize("cache", ["first_block", "mag", "taylorseer", "pyramid"])
def test_each_cache_cuts_block_work_and_is_removable(
    ltx: Path, uncached: tuple[int, int], cache: str
) -> None:
    full_calls, full_work = uncached
    pipe = load_tiny_ltx(ltx)
    ratios = calibrate_mag_ratios(pipe, STEPS, render_tiny_ltx) if cache == "mag" else None
    if ratios is not None:
        assert len(ratios) == STEPS and ratios[0] == 1.0
    enable_cache(pipe, cache, STEPS, ratios)  # type: ignore[arg-type]
    calls, work = _calls(pipe)
    assert calls == full_calls  # the denoiser is still called every step
    assert work < full_work, f"{cache} skipped no block work"
    denoiser(pipe).disable_cache()
    assert _calls(pipe) == (full_calls, full_work)


def test_a_unet_without_cache_hooks_is_refused() -> None:
    class UNetOnly:
        unet = torch.nn.Sequential(torch.nn.Linear(2, 2))

    reason = supports_cache(UNetOnly())
    assert reason is not None and "not a CacheMixin" in reason
    with pytest.raises(ValueError, match="not a CacheMixin"):
        enable_cache(UNetOnly(), "first_block", STEPS, None)
