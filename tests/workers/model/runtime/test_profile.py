"""The serving profile: the worker serves the measured choice for its device, else the safe one
and says why; the environment overrides either."""

from pathlib import Path

import pytest
import torch

from tests.workers.model.tiny import tiny_student
from workers.model import Animator
from workers.model.runtime.loading import serving_choice, with_overrides
from workers.model.runtime.profile import (
    PROFILE_FILE,
    SAFE,
    Choice,
    DeviceProfile,
    ServingProfile,
    choose,
    device_key,
    load_profile,
    save_profile,
    weights_hash,
)
from workers.settings import WorkerSettings

CPU = device_key("cpu")  # this machine's kind of CPU, as workers key profiles


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_student(tmp_path_factory.mktemp("models") / "student")


def _entry(model: Path, choice: Choice, device: str = CPU, weights: str = "") -> DeviceProfile:
    return DeviceProfile(
        device=device,
        torch="2.x",
        weights=weights or weights_hash(model),
        buckets=["4x16x16"],
        steps=4,
        threads=1,
        chosen=choice,
    )


def test_without_a_profile_the_safe_choice_and_why(student: Path) -> None:
    (student / PROFILE_FILE).unlink(missing_ok=True)
    choice, why = choose(student, CPU)
    assert choice == SAFE and choice.precision == "fp32" and not choice.compile
    assert PROFILE_FILE in why


def test_profile_for_this_device_and_weights_is_served(student: Path, tmp_path: Path) -> None:
    bf16 = Choice(precision="bf16")
    save_profile(student, _entry(student, bf16, device="cuda:Some GPU"))
    choice, why = choose(student, CPU)
    assert choice == SAFE and "cuda:Some GPU" in why  # another device's entry is not used
    save_profile(student, _entry(student, bf16))
    assert set(load_profile(student).devices) == {CPU, "cuda:Some GPU"}  # type: ignore[union-attr]
    assert choose(student, CPU)[0] == bf16
    save_profile(student, _entry(student, bf16, weights="0" * 16))
    choice, why = choose(student, CPU)
    assert choice == SAFE and "weights" in why  # measured on other weights: stale


def test_worker_serves_the_profile_and_the_environment_overrides_it(student: Path) -> None:
    save_profile(student, _entry(student, Choice(precision="bf16")))
    settings = WorkerSettings(model_dir=student)
    animator = Animator.from_settings(settings)
    assert (
        animator.variant.precision == "bf16"
        and "profile for cpu" in animator.info["serving_source"]
    )
    assert animator.info["serving_origin"] == "profile entry"
    override = WorkerSettings.from_env(
        {"ANIMFLEET_MODEL_DIR": str(student), "ANIMFLEET_WORKER_PRECISION": "fp32"}
    )
    choice, why = with_overrides(override, Choice(precision="bf16"), "profile")
    assert choice.precision == "fp32" and "environment" in why
    off = WorkerSettings.from_env(
        {"ANIMFLEET_MODEL_DIR": str(student), "ANIMFLEET_WORKER_PROFILE": "0"}
    )
    assert serving_choice(off, student, CPU)[0] == SAFE
    (student / PROFILE_FILE).unlink()


def test_a_broken_profile_is_reported_not_served(student: Path) -> None:
    (student / PROFILE_FILE).write_text('{"devices": {"cpu": {"chosen": 3}}}')
    choice, why = choose(student, CPU)
    assert choice == SAFE and "unreadable" in why
    (student / PROFILE_FILE).unlink()


def test_a_compiled_profile_without_packages_serves_eagerly_and_says_why(student: Path) -> None:
    save_profile(student, _entry(student, Choice(compile=True)))
    animator = Animator.from_settings(WorkerSettings(model_dir=student))
    assert animator.compiled is None and animator.info["compiled"] == []
    assert "no artifact" in animator.info["aot"]  # no torch.compile at boot unless asked
    (student / PROFILE_FILE).unlink()


def test_a_cpu_profile_names_the_instruction_set_it_was_measured_on() -> None:
    key = CPU
    assert key.startswith("cpu:") and torch.backends.cpu.get_cpu_capability() in key
    # A profile measured on another kind of CPU is not served here.
    assert key != "cpu:some-other-cpu"


def test_a_profile_from_another_kind_of_cpu_serves_the_safe_choice(student: Path) -> None:
    entry = _entry(student, Choice(precision="bf16"))
    (student / PROFILE_FILE).write_text(
        ServingProfile(devices={"cpu:AVX512+bf16+amx-elsewhere": entry}).model_dump_json()
    )
    choice, why = choose(student, CPU)
    assert choice == SAFE and "no profile for device" in why
    (student / PROFILE_FILE).unlink()
