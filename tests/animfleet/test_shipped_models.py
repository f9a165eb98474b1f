"""Shipped models resolve by name; the distilled student is served by default."""

from __future__ import annotations

from pathlib import Path

from animfleet.shipped_models import (
    MODELS_DIR,
    SHIPPED_STUDENT_DIR,
    resolve_model,
    shipped_model,
    shipped_teacher,
)


def test_a_shipped_model_resolves_by_name() -> None:
    assert resolve_model("animfleet-small") == MODELS_DIR / "animfleet-small"
    assert resolve_model("animfleet-small-distilled") == SHIPPED_STUDENT_DIR


def test_paths_and_unknown_names_stay_as_given(tmp_path: Path) -> None:
    assert resolve_model(tmp_path) == tmp_path
    assert resolve_model("no-such-model") == Path("no-such-model")
    assert resolve_model("models/animfleet-small") == Path("models/animfleet-small")


def test_the_student_is_the_default_and_the_teacher_stays_available() -> None:
    assert shipped_model() == SHIPPED_STUDENT_DIR
    assert shipped_teacher() == MODELS_DIR / "animfleet-small"
