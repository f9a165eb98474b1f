"""The model the project trains and ships (``models/animfleet-small``, see its README)."""

from __future__ import annotations

from pathlib import Path

SHIPPED_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "animfleet-small"


def shipped_model() -> Path | None:
    """The shipped model's ``from_pretrained`` directory, or None outside a source checkout."""
    return SHIPPED_MODEL_DIR if (SHIPPED_MODEL_DIR / "model_index.json").exists() else None
