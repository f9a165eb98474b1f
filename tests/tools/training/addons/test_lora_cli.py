"""The add-on command line: a stretch that does not finish the run says so and exports nothing;
the stretch that finishes it exports, evaluates and cards the add-on; ``eval`` re-evaluates it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.training.addons.lora_cli import main


def test_train_resumes_to_the_end_then_exports_evaluates_and_cards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, out = tmp_path / "run", tmp_path / "shake"
    common = ["--run", str(run), "--out", str(out), "--clips", "1", "--steps", "2"]
    # Zero minutes: the stretch stops after its first step, checkpointed.
    assert main(["train", "--motion", "shake", *common, "--minutes", "0"]) == 0
    assert "stopped at step 1" in capsys.readouterr().out and not out.exists()
    assert main(["train", "--motion", "shake", *common]) == 0
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 2 and training["config"]["motion"] == "shake"
    result = json.loads((out / "eval.json").read_text())
    assert result["motion"] == "shake" and result["clips"] == 1
    assert result["base_bit_identical_without_addon"] is True
    assert "Motion add-on: shake" in (out / "README.md").read_text()
    (out / "eval.json").unlink()
    assert main(["eval", "--addon", str(out), "--clips", "1"]) == 0
    assert json.loads((out / "eval.json").read_text()) == result
