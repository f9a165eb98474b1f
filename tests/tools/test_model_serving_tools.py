"""`animfleet model tune` and `model compile` on a tiny student: a profile chosen by measurement,
AOT packages loaded by key, a mismatched key reported, a forged package refused at warm-up."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from animfleet.jobs import JobParams
from launcher.command import build_parser
from tests.workers.model.tiny import tiny_student
from tools.serving.compile import compile_model
from tools.serving.tune import tune
from workers.model import Animator
from workers.model.runtime.aot import AOT_DIR, MANIFEST, AOTDenoiser, load_packages
from workers.model.runtime.boot_tune import candidates
from workers.model.runtime.loading import ShapeBucket, Variant
from workers.model.runtime.profile import (
    PROFILE_FILE,
    Choice,
    ServingProfile,
    device_key,
    load_profile,
    save_profile,
    weights_hash,
)

BUCKET = ShapeBucket(frames=4, height=16, width=16)
PARAMS = JobParams(prompt="pan left slowly", frames=4, fps=8, width=16, height=16, seed=3, steps=4)
VARIANT = Variant(name="tiny", steps=4)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny student with fp32 AOT packages for BUCKET, and another with other weights."""
    root = tmp_path_factory.mktemp("models")
    student, other = tiny_student(root / "student"), tiny_student(root / "other", seed=1)
    # Static only: the dynamic package is tests/tools/test_aot_coverage.py's.
    compile_model(student, [BUCKET], Choice(compile=True), progress=lambda _: None, dynamic=False)
    return student, other


def test_cli_has_tune_and_compile() -> None:
    parser = build_parser()
    args = parser.parse_args(["model", "tune", "--model", "m", "--buckets", "4x16x16"])
    assert args.floor_db == 40.0 and args.buckets == "4x16x16"
    assert parser.parse_args(["model", "compile", "--precision", "fp32"]).model
    compile_args = parser.parse_args(["model", "compile", "--publish", "--region", "eu"])
    assert compile_args.publish and compile_args.region == ["eu"] and not compile_args.static_only


def test_tune_measures_and_keeps_a_choice_above_the_floor(models: tuple[Path, Path]) -> None:
    student = models[0]
    entry = tune(student, [BUCKET], repeats=1, compile=False, progress=lambda _: None)
    # The worker's boot candidates for this CPU (bf16 only where it has bf16 instructions).
    assert [m.choice for m in entry.measured] == candidates(device_key("cpu"), compiled=False)
    reference = next(m for m in entry.measured if m.choice == Choice())
    assert reference.psnr_db == float("inf") and reference.accepted
    chosen = next(m for m in entry.measured if m.choice == entry.chosen)
    assert chosen.accepted and chosen.psnr_db >= 40
    assert entry.weights == weights_hash(student) and entry.buckets == ["4x16x16"]
    save_profile(student, entry)  # an infinite PSNR survives the JSON round trip
    assert load_profile(student) == ServingProfile(devices={device_key("cpu"): entry})
    (student / PROFILE_FILE).unlink()


def test_matching_packages_load_at_boot_and_match_eager(
    models: tuple[Path, Path], make_image: object
) -> None:
    student = models[0]
    animator = Animator(student, VARIANT, compile=True, aot=True)
    assert isinstance(animator.compiled, AOTDenoiser), animator.aot_status
    animator.warm_up([BUCKET])
    assert animator.info["compiled"] == ["unet (aot)"]
    assert animator.info["verified_psnr_db"]["4x16x16"] >= 40
    image = make_image(16, 16)  # type: ignore[operator]
    frames = animator.animate(image, PARAMS)
    expected = Animator(student, VARIANT).animate(image, PARAMS)
    assert np.abs(frames.astype(int) - expected.astype(int)).max() <= 2
    assert animator.recompiles == 0  # the bucket's shape has a package


def test_a_key_mismatch_is_reported(models: tuple[Path, Path]) -> None:
    student = models[0]
    unet = Animator(student, VARIANT).pipeline.unet
    denoiser, why = load_packages(unet, student, "bf16", True)
    assert denoiser is None and "no artifact" in why and "fp32" in why  # lists what exists
    manifest_path = next((student / AOT_DIR).glob(f"*/{MANIFEST}"))
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "torch": "1.0"}))
    try:
        denoiser, why = load_packages(unet, student, "fp32", True)
        assert denoiser is None and "torch 1.0 !=" in why
    finally:
        manifest_path.write_text(json.dumps(manifest))


def test_a_forged_package_is_refused_at_warm_up(models: tuple[Path, Path]) -> None:
    """Packages of other weights under this model's key: loaded, then caught by the check."""
    student, other = models
    source = next((student / AOT_DIR).glob(f"*/{MANIFEST}")).parent
    target = other / AOT_DIR / source.name.replace(weights_hash(student), weights_hash(other))
    shutil.copytree(source, target)
    manifest = json.loads((target / MANIFEST).read_text())
    (target / MANIFEST).write_text(json.dumps({**manifest, "weights": weights_hash(other)}))
    animator = Animator(other, VARIANT, compile=True, aot=True)
    assert isinstance(animator.compiled, AOTDenoiser)
    animator.warm_up([BUCKET])
    assert animator.compiled is None and animator.info["compiled"] == []
    assert animator.info["verified_psnr_db"]["4x16x16"] < 40
