"""The shipped student's serving profile has an entry for every CPU kind seen so far, measured
with compiled candidates, and a worker on this machine serves its entry, not the fallback."""

from __future__ import annotations

import pytest

from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from workers.model.animator import load_animator
from workers.model.runtime.boot_tune import candidates
from workers.model.runtime.profile import device_key, load_profile, lookup
from workers.settings import WorkerSettings

# The CPU kinds the fleet has run on: an AVX2 EPYC without bf16 instructions, and an AVX-512
# EPYC with them. A new kind measures its own entry at boot (boot_tune), then gets one here.
KINDS_SEEN = ("cpu:AVX2", "cpu:AVX512+bf16")


@pytest.mark.parametrize("kind", KINDS_SEEN)
def test_the_shipped_profile_has_a_current_entry_for_each_kind_seen(kind: str) -> None:
    choice, why = lookup(SHIPPED_STUDENT_DIR, kind)
    assert choice is not None, why  # present, and measured on these weights


def test_this_kinds_entry_measured_every_candidate_compiled_ones_included() -> None:
    profile = load_profile(SHIPPED_STUDENT_DIR)
    assert profile is not None
    entry = profile.devices["cpu:AVX512+bf16"]
    assert {m.choice for m in entry.measured} == set(candidates(entry.device))
    assert any(m.choice.compile for m in entry.measured if m.accepted)
    fastest = min((m for m in entry.measured if m.accepted), key=lambda m: m.seconds_per_video)
    assert entry.chosen == fastest.choice


def test_a_worker_here_serves_the_measured_entry_not_the_fallback() -> None:
    kind = device_key("cpu")
    assert kind in KINDS_SEEN, f"no shipped entry for {kind}: run `make tune-model` on it"
    settings = WorkerSettings.from_env(
        {"ANIMFLEET_MODEL_DIR": str(SHIPPED_STUDENT_DIR), "ANIMFLEET_WORKER_BOOT_TUNE_S": "0"}
    )
    animator = load_animator(settings)
    choice, _ = lookup(SHIPPED_STUDENT_DIR, kind)
    assert choice is not None
    assert animator.info["serving_origin"] == "profile entry", animator.info["serving_source"]
    assert animator.variant.precision == choice.precision
    assert animator.variant.context_dedup == choice.context_dedup
