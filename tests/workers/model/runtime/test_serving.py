"""A model directory's serving.json sets how it is served: guidance, steps, passes, range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.model.runtime.serving import SERVING_FILE, Serving, load_serving


def write(directory: Path, document: dict[str, object]) -> Path:
    (directory / SERVING_FILE).write_text(json.dumps(document))
    return directory


def test_absent_file_keeps_the_defaults(tmp_path: Path) -> None:
    assert load_serving(tmp_path) == Serving()
    assert (Serving().image_guidance_scale, Serving().text_guidance_scale) == (1.5, 3.0)


def test_scales_are_read(tmp_path: Path) -> None:
    serving = load_serving(write(tmp_path, {"image_guidance_scale": 1, "text_guidance_scale": 2.5}))
    assert (serving.image_guidance_scale, serving.text_guidance_scale) == (1.0, 2.5)


def test_unknown_keys_are_refused_naming_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"serving\.json(.|\n)*guidance"):
        load_serving(write(tmp_path, {"guidance": 2}))


def test_scales_outside_the_trained_range_are_refused(tmp_path: Path) -> None:
    document = {
        "image_guidance_scale": 3.0,
        "guidance_range": {"image": [1.0, 2.0], "text": [1.0, 3.0]},
    }
    with pytest.raises(ValueError, match="outside"):
        load_serving(write(tmp_path, document))


def test_the_shipped_models_are_served_as_they_were_evaluated(shipped_model: Path) -> None:
    teacher = load_serving(shipped_model.parent / "animfleet-small")
    assert (teacher.image_guidance_scale, teacher.text_guidance_scale) == (1.0, 1.0)
    assert teacher.passes_per_step in (None, 3)


def test_the_student_is_served_by_name_with_one_pass_and_its_steps() -> None:
    from workers.model.animator import Animator
    from workers.settings import WorkerSettings

    # Measuring an unprofiled CPU kind at boot is tested on its own (test_boot_tune.py).
    no_tuning = {"ANIMFLEET_WORKER_BOOT_TUNE_S": "0"}
    settings = WorkerSettings.from_env(
        {"ANIMFLEET_MODEL_DIR": "animfleet-small-distilled", **no_tuning}
    )
    animator = Animator.from_settings(settings)
    variant = animator.variant
    assert (variant.name, variant.steps, variant.passes_per_step) == (
        "animfleet-small-distilled",
        4,  # distilled for 8; 4 hold its motion accuracy and run twice as fast (its card)
        1,
    )
    assert variant.guidance_range == ((1.0, 2.0), (1.0, 3.0))
    assert (variant.image_guidance_scale, variant.text_guidance_scale) == (1.0, 1.0)
    teacher = Animator.from_settings(
        WorkerSettings.from_env({"ANIMFLEET_MODEL_DIR": "animfleet-small", **no_tuning})
    )
    assert (teacher.variant.steps, teacher.variant.passes_per_step) == (15, 3)
