import json
from pathlib import Path

from tools.training.base.card import write_card


def test_card_states_the_measured_numbers_and_leaves_no_placeholder(tmp_path: Path) -> None:
    training = {
        "steps": 1234,
        "train_seconds": 600.0,
        "parameters": {"unet": 1000, "text_encoder": 20},
        "config": {"seed": 7},
    }
    (tmp_path / "training.json").write_text(json.dumps(training))
    row = {
        "clips": 64,
        "motion_accuracy": 0.921875,
        "psnr": 27.5,
        "copy_psnr": 18.25,
        "ssim": 0.9,
        "copy_ssim": 0.4,
        "temporal_residual": 0.007,
        "truth_temporal_residual": 0.006,
        "predicted": {"pan_left": 59, "static": 5},
    }
    settings = {
        "per_family": 64,
        "size": 32,
        "image_guidance_scale": 1.0,
        "text_guidance_scale": 1.0,
    }
    report = {"results": {"15": {"pan": row}}, "settings": settings}
    text = write_card(tmp_path, report, notes="a note").read_text()
    assert "1234 steps (10 minutes" in text and '{"seed": 7}' in text
    assert "| 15 | pan | 64 | 92.2% | 27.50 | 18.25 |" in text
    assert "pan_left 59, static 5" in text and "a note" in text
    assert "{{" not in text
