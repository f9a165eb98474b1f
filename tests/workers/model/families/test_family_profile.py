"""The serving profile of a family checkpoint, measured on a tiny random-weight LTX-Video
pipeline: options that cannot apply or fall below the PSNR floor are rejected with why, the
choice is recorded as JSON and applied the same way on load."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.workers.model.families.profile_tiny import (
    STEPS,
    load_tiny_ltx,
    render_tiny_ltx,
)
from workers.model.families.profile import (
    FamilyChoice,
    apply_choice,
    family_weights,
    load_family_profile,
    save_family_profile,
)
from workers.model.families.tune import Search, tune
from workers.model.runtime.profile import psnr


def test_search_follows_the_hardware() -> None:
    assert Search.for_device("cpu:AVX2").precisions == ()
    assert Search.for_device("cpu:AVX512+bf16").precisions == ("bf16",)
    assert "_native_flash" in Search.for_device("cuda:NVIDIA H100").attention


def test_options_below_the_floor_are_rejected_and_the_record_says_why(ltx: Path) -> None:
    # A floor above what any cache reaches on these weights: every cache must be rejected.
    search = Search(
        attention=("_native_flash", "_native_math"),
        schedulers=("UniPCMultistepScheduler",),
        caches=("first_block", "mag"),
    )
    entry = tune(
        lambda: load_tiny_ltx(ltx),
        render_tiny_ltx,
        kind="cpu:TEST",
        pipeline="LTXImageToVideoPipeline",
        weights=family_weights(ltx),
        size="9x32x32",
        steps=STEPS,
        search=search,
        floor_db=60.0,
        rounds=1,
    )
    by_option = {(m.option, m.choice.label()): m for m in entry.measured}
    reference = entry.measured[0]
    assert reference.option == "reference" and math.isinf(reference.psnr_db)
    flash = next(m for m in entry.measured if m.choice.attention == "_native_flash")
    assert not flash.accepted and flash.note.startswith("cannot apply")  # LTX passes a mask
    math_kernel = next(m for m in entry.measured if m.choice.attention == "_native_math")
    assert math_kernel.accepted and math_kernel.psnr_db >= 60  # the same attention, exactly
    caches = [m for m in entry.measured if m.option == "cache"]
    assert {m.choice.cache for m in caches} == {"first_block", "mag"}
    for measurement in caches:
        assert not measurement.accepted and "floor" in measurement.note
        assert measurement.block_linear_calls < reference.block_linear_calls
    swap = next(m for m in entry.measured if m.option == "scheduler")
    assert not swap.accepted  # another solver's trajectory: not the same video
    assert entry.chosen.cache == "none" and entry.chosen.scheduler == ""
    assert len(entry.mag_ratios) == STEPS
    assert len(by_option) == len(entry.measured)
    assert "below the 60 dB floor" in entry.summary()

    save_family_profile(ltx, entry)
    assert load_family_profile(ltx)["cpu:TEST"] == entry


def test_an_applied_choice_serves_what_was_measured(ltx: Path) -> None:
    reference = render_tiny_ltx(load_tiny_ltx(ltx))
    choice = FamilyChoice(attention="_native_math")
    served = render_tiny_ltx(apply_choice(load_tiny_ltx(ltx), choice, STEPS))
    assert served.shape == reference.shape == (9, 32, 32, 3)
    assert psnr(served, reference) >= 60


def test_an_option_the_pipeline_lacks_is_an_error(ltx: Path) -> None:
    with pytest.raises(ValueError, match="no scheduler 'NoSuchScheduler'"):
        apply_choice(load_tiny_ltx(ltx), FamilyChoice(scheduler="NoSuchScheduler"), STEPS)
    with pytest.raises(ValueError, match="neither a transformer nor a unet"):
        apply_choice(object(), FamilyChoice(), STEPS)
