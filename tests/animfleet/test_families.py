"""Each family's rules: read from a checkpoint's own configs, applied to a job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from animfleet.families import (
    FAMILIES,
    FamilySpec,
    JobAsk,
    Refused,
    UnknownFamily,
    family_of,
    fit_job,
    read_spec,
    spec_of_checkpoint,
    supported_classes,
)


def spec(family: str, **overrides: object) -> FamilySpec:
    rules = FAMILIES[family]
    fields: dict[str, object] = {
        "family": family,
        "pipeline_class": rules.classes[0],
        "frame_step": rules.frame_step,
        "max_frames": rules.max_frames,
        "size_multiple": rules.size_multiple,
        "reads_text": rules.reads_text,
        "loops": bool(rules.loop_classes),
    }
    return FamilySpec.model_validate(fields | overrides)


def write_checkpoint(root: Path, class_name: str, **configs: dict[str, object]) -> Path:
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": class_name}))
    for part, config in configs.items():
        (root / part).mkdir()
        (root / part / "config.json").write_text(json.dumps(config))
    return root


@pytest.mark.parametrize(
    ("family", "asked", "delivered"),
    [
        ("ltx", 8, 9),
        ("ltx", 20, 17),
        ("ltx", 21, 25),
        ("wan", 8, 9),
        ("wan", 11, 13),
        ("svd", 8, 8),
    ],
)
def test_frames_round_to_the_nearest_legal_count_and_say_so(
    family: str, asked: int, delivered: int
) -> None:
    fitted = fit_job(spec(family), "m@1", JobAsk(frames=asked, width=512, height=512))
    assert fitted.frames == delivered
    said = [a for a in fitted.adjustments if a.field == "frames"]
    assert [(a.asked, a.delivered) for a in said] == (
        [(asked, delivered)] if asked != delivered else []
    )


def test_sides_round_to_the_family_multiple_and_say_so() -> None:
    fitted = fit_job(spec("ltx"), "m@1", JobAsk(frames=9, width=520, height=296))
    assert (fitted.width, fitted.height) == (512, 288)
    assert {(a.field, a.asked, a.delivered) for a in fitted.adjustments} == {
        ("width", 520, 512),
        ("height", 296, 288),
    }
    assert "multiples of 32" in fitted.adjustments[0].rule


@pytest.mark.parametrize(
    ("family", "ask", "field", "words"),
    [
        ("cogvideox", JobAsk(9, 64, 64, loop=True), "loop", "cannot condition the last frame"),
        ("ltx", JobAsk(9, 64, 64, regions=True), "regions", "procedural brush"),
        ("svd", JobAsk(9, 64, 64, negative_prompt=True), "negative_prompt", "reads no text"),
        ("svd", JobAsk(30, 64, 64), "frames", "at most 25 frames"),
    ],
)
def test_what_a_family_cannot_do_is_refused_naming_field_model_and_rule(
    family: str, ask: JobAsk, field: str, words: str
) -> None:
    with pytest.raises(Refused) as refused:
        fit_job(spec(family, loops=False), "clip@3", ask)
    assert refused.value.field == field
    assert words in str(refused.value) and "clip@3" in str(refused.value)


def test_a_fixed_size_checkpoint_refuses_another_size_and_fills_a_default() -> None:
    fixed = spec("cogvideox", fixed_size=(720, 480))
    with pytest.raises(Refused, match="only 720x480"):
        fit_job(fixed, "cog@1", JobAsk(49, 512, 512))
    fitted = fit_job(fixed, "cog@1", JobAsk(49, 512, 384, size_given=False))
    assert (fitted.width, fitted.height) == (720, 480)


def test_real_checkpoint_configs_give_the_published_rules(tmp_path: Path) -> None:
    ltx = write_checkpoint(
        tmp_path / "ltx",
        "LTXConditionPipeline",
        vae={"patch_size": 4, "patch_size_t": 1, "spatio_temporal_scaling": [True] * 3 + [False]},
        transformer={"patch_size": 1},
    )
    got = read_spec(ltx)
    assert (got.frame_step, got.size_multiple, got.loops) == (8, 32, True)
    wan21 = write_checkpoint(
        tmp_path / "wan",
        "WanImageToVideoPipeline",
        vae={"temperal_downsample": [False, True, True]},
        transformer={"patch_size": [1, 2, 2]},
    )
    index = {"_class_name": "WanImageToVideoPipeline", "image_encoder": ["transformers", "X"]}
    (wan21 / "model_index.json").write_text(json.dumps(index))
    got = read_spec(wan21)
    assert (got.frame_step, got.size_multiple, got.loops) == (4, 16, False)  # not FLF2V
    cog = write_checkpoint(
        tmp_path / "cog",
        "CogVideoXImageToVideoPipeline",
        vae={"temporal_compression_ratio": 4, "block_out_channels": [128, 256, 256, 512]},
        transformer={
            "patch_size": 2,
            "sample_width": 90,
            "sample_height": 60,
            "sample_frames": 49,
            "use_learned_positional_embeddings": True,
        },
    )
    got = read_spec(cog)
    assert (got.frame_step, got.max_frames, got.fixed_size) == (4, 49, (720, 480))


def test_an_unknown_class_is_refused_naming_it_and_the_families(tmp_path: Path) -> None:
    odd = write_checkpoint(tmp_path / "odd", "MochiPipeline")
    with pytest.raises(UnknownFamily) as refused:
        spec_of_checkpoint(odd)
    message = str(refused.value)
    assert "MochiPipeline" in message
    assert all(name in message for name in supported_classes())
    assert spec_of_checkpoint(write_checkpoint(tmp_path / "own", "AnimationPipeline")) is None
    assert family_of("HunyuanVideoImageToVideoPipeline").name == "hunyuan"
