"""A worker on a device kind the serving profile lacks measures its own entry at boot, within
its budget, serves the fastest accepted candidate, and shares the entry with its peers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from storage.local import LocalStore
from tests.workers.model.tiny import tiny_student
from workers.model import Animator
from workers.model.runtime.boot_tune import SharedProfiles, candidates, shared_key
from workers.model.runtime.profile import PROFILE_FILE, SAFE, Choice, DeviceProfile
from workers.settings import WorkerSettings

FAKE_KIND = "cpu:FAKE512+bf16"  # a kind no profile has, with bf16 instructions


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tiny_student(tmp_path_factory.mktemp("models") / "student")
    assert not (path / PROFILE_FILE).exists()
    return path


def _settings(student: Path, **env: str) -> WorkerSettings:
    return WorkerSettings.from_env(
        {
            "ANIMFLEET_MODEL_DIR": str(student),
            "ANIMFLEET_WORKER_DEVICE_KIND": FAKE_KIND,
            "ANIMFLEET_WORKER_SHAPE_BUCKETS": "4x16x16",
            **env,
        }
    )


def test_candidates_follow_the_hardware() -> None:
    bf16, compiled = Choice(precision="bf16"), Choice(compile=True)
    assert candidates("cpu:AVX2") == [SAFE, compiled]  # bf16 without bf16 units: ~40x slower
    assert candidates("cpu:AVX512+bf16+amx")[:2] == [SAFE, bf16]
    assert Choice(precision="bf16", compile=True) in candidates("cuda:Some GPU")
    assert candidates("cpu:AVX512+bf16", compiled=False) == [SAFE, bf16]


def test_the_tuner_measures_the_same_list_with_attention_variants() -> None:
    # For a U-Net with attention the offline tuner also measures stock attention (the
    # reference, first) and each pinned kernel; the precisions follow the hardware alike.
    cpu = candidates("cpu:AVX2", attention=True)
    assert cpu[0] == Choice(context_dedup=False)
    assert len(cpu) == 2 * 3 * 2  # de-dup or not, 3 kernels, eager or compiled
    assert {c.precision for c in cpu} == {"fp32"}
    gpu = candidates("cuda:Some GPU", attention=True)
    assert Choice(precision="bf16", compile=True, attention="cudnn") in gpu
    assert all(c.attention != "cudnn" for c in cpu)


def test_a_kind_nobody_profiled_is_measured_at_boot_and_shared(
    student: Path, tmp_path: Path
) -> None:
    shared = SharedProfiles(LocalStore(tmp_path / "bucket"))
    budget = 20.0
    settings = _settings(
        student,
        ANIMFLEET_WORKER_BOOT_TUNE_S=str(budget),
        ANIMFLEET_WORKER_BOOT_TUNE_COMPILE="0",
    )
    started = time.monotonic()
    animator = Animator.from_settings(settings, shared)
    booted_s = time.monotonic() - started

    entry = shared.read(student, FAKE_KIND)
    assert entry is not None and entry.device == FAKE_KIND
    measured = {m.choice: m for m in entry.measured}
    assert set(measured) == {SAFE, Choice(precision="bf16")}
    fastest = min((m for m in measured.values() if m.accepted), key=lambda m: m.seconds_per_video)
    assert entry.chosen == fastest.choice and measured[SAFE].accepted
    assert all(m.seconds_per_video > 0 for m in measured.values())
    # It serves what it measured, the loaded candidate itself, and says so.
    assert animator.variant.precision == entry.chosen.precision
    assert "measured at worker boot" in animator.info["serving_source"]
    assert animator.info["serving_origin"] == "measured at boot"
    # Within its budget: measuring stops once it is spent; a load in progress (here each is
    # well under a second) finishes, so the boot may pass the budget by at most that.
    assert booted_s < budget + 10

    # A peer of the same kind reads the entry instead of measuring.
    peer = Animator.from_settings(settings, shared)
    assert f"measured by a peer of kind {FAKE_KIND}" in peer.info["serving_source"]
    assert peer.info["serving_origin"] == "read from the bucket"
    assert peer.variant.precision == entry.chosen.precision


def test_an_entry_for_other_weights_or_kinds_is_not_taken(student: Path, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "bucket")
    shared = SharedProfiles(store)
    stale = DeviceProfile(
        device=FAKE_KIND,
        torch="2.x",
        weights="0" * 16,  # measured on other weights
        buckets=["4x16x16"],
        steps=4,
        threads=1,
        chosen=Choice(precision="bf16"),
    )
    store.put(shared_key(student, FAKE_KIND), stale.model_dump_json().encode(), "application/json")
    assert shared.read(student, FAKE_KIND) is None
    assert shared.read(student, "cpu:OTHER") is None
    store.put(shared_key(student, FAKE_KIND), b"{not json", "application/json")
    assert shared.read(student, FAKE_KIND) is None  # unreadable: measured again, not served


def test_measuring_off_serves_the_safe_choice_and_says_why(student: Path) -> None:
    animator = Animator.from_settings(_settings(student, ANIMFLEET_WORKER_BOOT_TUNE_S="0"))
    assert animator.variant.precision == "fp32" and animator.compiled is None
    assert animator.info["serving_origin"] == "fallback"
    assert (
        "no profile for device" in animator.info["serving_source"]
        or PROFILE_FILE in (animator.info["serving_source"])
    )
