"""The models the project trains and ships (``models/``, each with a README model card).

``animfleet-small`` is the teacher (three guided passes per step); ``animfleet-small-distilled``
is its guidance- and step-distilled student (one pass, 8 steps), served by default;
``animfleet-small-slim`` is that student with fewer channels per layer, chosen by a PCA of its
filters (``animfleet slim``). Any of them is selected by name (:func:`resolve_model`).
"""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
SHIPPED_TEACHER_DIR = MODELS_DIR / "animfleet-small"
SHIPPED_STUDENT_DIR = MODELS_DIR / "animfleet-small-distilled"
SHIPPED_SLIM_DIR = MODELS_DIR / "animfleet-small-slim"
SHIPPED_MODEL_DIR = SHIPPED_TEACHER_DIR  # what `animfleet train` exports and `eval` reads


def _present(directory: Path) -> Path | None:
    return directory if (directory / "model_index.json").exists() else None


def shipped_model() -> Path | None:
    """The model served by default: the distilled student, else the teacher; None outside a
    source checkout."""
    return _present(SHIPPED_STUDENT_DIR) or _present(SHIPPED_TEACHER_DIR)


def shipped_teacher() -> Path | None:
    return _present(SHIPPED_TEACHER_DIR)


def resolve_model(value: str | Path) -> Path:
    """A model directory, or the name of a shipped model (``animfleet-small-distilled``)."""
    path = Path(value)
    if not path.exists() and len(path.parts) == 1 and _present(MODELS_DIR / path.name):
        return MODELS_DIR / path.name
    return path
