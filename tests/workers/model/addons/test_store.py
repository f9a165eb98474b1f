"""Add-on files, the worker's LRU store and its background prefetch; the shipped add-ons on
the shipped student (bit-identical without them)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from animfleet.addons import AddonUse
from animfleet.jobs import JobParams
from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from workers.model.addons.store import AddonError, AddonStore, available, read_addon
from workers.model.animator import Animator, ModelError
from workers.model.pipelines.generation import GenerationParams

BASE = "base-model"


def _write(root: Path, name: str, base: str = BASE, width: int = 16) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    tensors = {
        "motion_head.0.lora_A.weight": torch.randn(4, width),
        "motion_head.0.lora_B.weight": torch.randn(8, 4),
        "flow_head.lora_A.weight": torch.randn(4, 3, 3, 3),
        "flow_head.lora_B.weight": torch.randn(2, 4, 1, 1),
    }
    meta = {"base": base, "rank": "4", "alpha": "8"}
    save_file(tensors, str(directory / "addon.safetensors"), metadata=meta)
    return directory


def test_read_addon_folds_alpha_over_rank(tmp_path: Path) -> None:
    _write(tmp_path, "shake")
    addon = read_addon(tmp_path / "shake", "shake", BASE)
    assert set(addon.layers) == {"motion_head.0", "flow_head"}
    assert addon.layers["flow_head"].up.shape == (2, 4, 1, 1)
    assert addon.nbytes > 0
    with pytest.raises(AddonError, match="is for"):
        read_addon(tmp_path / "shake", "shake", "another-model")
    with pytest.raises(AddonError, match=r"no addon\.safetensors"):
        read_addon(tmp_path / "missing", "missing", BASE)
    _write(tmp_path, "other", base="another-model")
    assert available(tmp_path, BASE) == ["shake"]


def test_store_prefetches_in_the_background_and_evicts_least_recently_used(
    tmp_path: Path,
) -> None:
    for name in ("a", "b", "c"):
        _write(tmp_path, name)
    one = read_addon(tmp_path / "a", "a", BASE).nbytes
    store = AddonStore(tmp_path, BASE, cap_bytes=2 * one)
    try:
        assert store.names() == ["a", "b", "c"]
        for future in store.prefetch(["a", "b"]):
            future.result()
        assert store.held() == ["a", "b"]
        store.get("a")  # a is now the most recent
        assert store.hits == 1
        store.get("c")  # loaded on demand, evicting b
        assert store.held() == ["a", "c"]
        assert store.misses == 1 and store.evictions == 1
        assert store.held_bytes <= 2 * one
        with pytest.raises(AddonError, match="not an add-on name"):
            store.get("../etc")
    finally:
        store.close()


@pytest.fixture(scope="module")
def student() -> Animator:
    return Animator(SHIPPED_STUDENT_DIR)


def _image() -> bytes:
    pixels = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_student_serves_its_addons_and_stays_bit_identical_without(
    student: Animator,
) -> None:
    from workers.model.runtime.loading import load_pipeline, prepare_image

    assert student.addons is not None
    assert {"shake", "pulse", "orbit"} <= set(student.addons.names())
    params = JobParams(prompt="still", frames=4, fps=8, width=32, height=32, seed=1, steps=2)
    image = _image()
    pipe = load_pipeline(SHIPPED_STUDENT_DIR, student.variant)  # never had a branch
    reference = pipe(
        prepare_image(image, 32, 32), GenerationParams.for_job(params, student.variant)
    )
    shaken = student.animate(image, params.model_copy(update={"addons": (AddonUse(name="shake"),)}))
    assert not np.array_equal(shaken, reference)
    assert np.array_equal(student.animate(image, params), reference)
    with pytest.raises(ModelError, match="no addon"):
        student.animate(image, params.model_copy(update={"addons": (AddonUse(name="nope"),)}))
