"""A model directory's serving.json sets the guidance it is served with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.pipeline.animator import SERVING_FILE, serving_guidance


def test_absent_file_keeps_the_defaults(tmp_path: Path) -> None:
    assert serving_guidance(tmp_path) == (1.5, 3.0)


def test_scales_are_read(tmp_path: Path) -> None:
    (tmp_path / SERVING_FILE).write_text(
        json.dumps({"image_guidance_scale": 1, "text_guidance_scale": 2.5})
    )
    assert serving_guidance(tmp_path) == (1.0, 2.5)


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    (tmp_path / SERVING_FILE).write_text(json.dumps({"guidance": 2}))
    with pytest.raises(ValueError, match="unknown keys"):
        serving_guidance(tmp_path)


def test_the_shipped_model_is_served_as_it_was_evaluated(shipped_model: Path) -> None:
    assert serving_guidance(shipped_model) == (1.0, 1.0)
