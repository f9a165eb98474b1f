"""What a worker serves a family checkpoint with: measured at boot when nobody measured its
device kind, stored in the bucket for its peers, read back without measuring, and applied
through the adapters' profile hook."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from storage.local import LocalStore
from tools.families.tiny import build_tiny
from workers.model.animator import Animator
from workers.model.families.profile import (
    REFERENCE,
    FamilyChoice,
    FamilyProfile,
    family_weights,
    save_family_profile,
)
from workers.model.families.registry import load_family
from workers.model.families.serving import (
    SharedFamilyProfiles,
    card_renderer,
    choose_family_profile,
)
from workers.settings import WorkerSettings

KIND = "cpu:TESTKIND"
SIZE, STEPS = (9, 32, 32), 3


@pytest.fixture(scope="module")
def tiny_ltx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny("ltx", tmp_path_factory.mktemp("models") / "ltx")


def _choose(model_dir: Path, load: Any, **changes: Any) -> Any:
    options: dict[str, Any] = dict(
        kind=KIND, device="cpu", size=SIZE, steps=STEPS, budget_s=600.0, shared=None
    )
    options.update(changes)
    return choose_family_profile(model_dir, load, **options)


def _never() -> Any:
    raise AssertionError("measured although an entry existed")


def _math_entry(model_dir: Path) -> FamilyProfile:
    """A profile entry for this kind choosing the math attention backend (an easy mark)."""
    return FamilyProfile(
        device=KIND,
        torch=torch.__version__,
        diffusers="test",
        pipeline="LTXImageToVideoPipeline",
        weights=family_weights(model_dir),
        size="9x32x32",
        steps=STEPS,
        chosen=FamilyChoice(attention="_native_math"),
    )


def test_measured_at_boot_once_then_read_from_the_bucket(tiny_ltx: Path, tmp_path: Path) -> None:
    shared = SharedFamilyProfiles(LocalStore(tmp_path / "bucket"))
    served = _choose(tiny_ltx, lambda: load_family(tiny_ltx), shared=shared)
    assert served.source.startswith(f"no family profile for {KIND}: measured at boot")
    assert served.memory.storage == "resident"
    stored = list((tmp_path / "bucket" / "serving-profiles").glob("*/*.family.json"))
    assert len(stored) == 1
    again = _choose(tiny_ltx, _never, shared=shared)
    assert again.choice == served.choice
    assert again.source.startswith(f"measured by a peer of kind {KIND}")


def test_the_file_beside_the_model_wins_and_measuring_off_serves_fp32_eager(
    tiny_ltx: Path,
) -> None:
    off = _choose(tiny_ltx, _never, budget_s=0)
    assert off.choice == REFERENCE and "measuring off" in off.source
    entry = _math_entry(tiny_ltx)
    save_family_profile(tiny_ltx, entry)
    served = _choose(tiny_ltx, _never)
    assert served.choice.attention == "_native_math"
    assert served.source == f"family profile for {KIND}"
    save_family_profile(tiny_ltx, entry.model_copy(update={"weights": "other"}))
    assert _choose(tiny_ltx, _never, budget_s=0).choice == REFERENCE  # other weights' entry


def test_the_hook_serves_the_choice(tiny_ltx: Path) -> None:
    served = _choose(tiny_ltx, _never, budget_s=0)
    served = type(served)(FamilyChoice(attention="_native_math"), served.memory, "test")
    adapter = load_family(tiny_ltx, profile=served.hook("cpu", STEPS))
    frames = card_renderer(*SIZE, STEPS)(adapter)
    assert frames.shape == (9, 32, 32, 3)
    processors = [m.processor for m in adapter.denoiser.modules() if hasattr(m, "processor")]
    assert {str(p._attention_backend) for p in processors} == {"AttentionBackendName._NATIVE_MATH"}


def test_a_worker_serves_a_family_checkpoint_with_its_profile(
    tiny_ltx: Path, tmp_path: Path
) -> None:
    """``Animator.from_settings`` takes the family path: the profile entry beside the checkpoint
    for this device kind is applied to the loaded pipeline and named in the worker's info."""
    model_dir = tmp_path / "ltx"
    shutil.copytree(tiny_ltx, model_dir)
    entry = _math_entry(model_dir)
    save_family_profile(model_dir, entry)
    settings = WorkerSettings(
        model_dir=model_dir, device_kind=KIND, shape_buckets="9x32x32", boot_tune_s=0
    )
    animator = Animator.from_settings(settings)
    assert animator.family is not None
    assert animator.info["serving_source"] == f"family profile for {KIND}"
    modules = animator.family.denoiser.modules()
    processors = [m.processor for m in modules if hasattr(m, "processor")]
    assert {str(p._attention_backend) for p in processors} == {"AttentionBackendName._NATIVE_MATH"}
