"""``animfleet eval --student``: every arm on the same clips, evaluations counted, bar checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.training.conftest import tiny
from tools.training.base.card import write_student_card
from tools.training.student.compare import CompareSettings, check_bar, markdown, run_comparison
from tools.training.student.distill import Distiller


@pytest.fixture(scope="module")
def student(teacher: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("student")
    distiller = Distiller(root / "run", tiny(teacher))
    distiller.make_targets()
    distiller.train()
    return distiller.export(root / "model")


def test_all_arms_run_on_the_same_clips_with_counted_evaluations(
    teacher: Path, student: Path, tmp_path: Path
) -> None:
    settings = CompareSettings(
        per_family=2, families=("pan", "zoom"), guidance=((1.0, 1.0), (2.0, 3.0)), size=16
    )
    report = run_comparison(teacher, student, tmp_path, settings)
    for key in ("image 1, text 1", "image 2, text 3"):
        rows = report["results"][key]
        evaluations = {arm: row["unet_evaluations"] for arm, row in rows.items()}
        assert evaluations == {
            "teacher 32x3": 96,
            "teacher 15x3": 45,
            "teacher 8x3": 24,
            "student 8x1": 8,
            "student 4x1": 4,
        }
        assert all(row["clips"] == 4 for row in rows.values())
        assert rows["teacher 32x3"]["psnr_vs_reference"] == 99.0  # itself, capped
        assert rows["teacher 32x3"]["speedup_vs_reference"] == 1.0
        assert report["bar"][key]["12x fewer U-Net evaluations"]
    assert json.loads((tmp_path / "compare.json").read_text())["results"] == report["results"]
    assert "| student 8x1 | 8 |" in (tmp_path / "compare.md").read_text()
    assert (tmp_path / "contact_sheet_g2_3.png").exists()
    card = write_student_card(student, markdown(report), report).read_text()
    assert "{{" not in card and "| student 8x1 | 8 |" in card and "image 1 to 2" in card


def test_the_bar_fails_when_the_student_is_further_from_the_reference() -> None:
    row = {
        "unet_evaluations": 8.0,
        "psnr_vs_reference": 30.0,
        "motion_accuracy": 1.0,
        "speedup_vs_reference": 10.0,
    }
    rows = {
        "teacher 32x3": {**row, "unet_evaluations": 96.0, "psnr_vs_reference": 99.0},
        "teacher 8x3": {**row, "psnr_vs_reference": 40.0},
        "student 8x1": row,
    }
    bar = check_bar(rows)
    assert bar["12x fewer U-Net evaluations"] and bar["latency >= 8x lower"]
    assert not bar["closer to the reference than teacher 8x3"]
    rows["student 8x1"] = {**row, "motion_accuracy": 0.96, "speedup_vs_reference": 7.9}
    bar = check_bar(rows)
    assert not bar["motion accuracy within 3 points"] and not bar["latency >= 8x lower"]
