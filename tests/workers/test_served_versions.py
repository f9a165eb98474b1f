"""The worker's shelf of model versions: its own model, registry versions by LRU."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from storage.registry import content_hash, directory_files
from workers.model import Animator, ModelError
from workers.served_versions import ModelShelf, boot_versions, own_version
from workers.settings import WorkerSettings


def test_versions_load_once_and_the_least_recently_used_leaves() -> None:
    loads: list[str] = []

    def load(ref: str) -> Animator:
        if ref == "bad@1":
            raise ModelError("no such version")
        loads.append(ref)
        return cast(Animator, type("Loaded", (), {"load_time_s": 0.0, "ref": ref})())

    own = cast(Animator, object())
    shelf = ModelShelf(own, "own@sha256-1", load, capacity=2)
    assert shelf.get(None) == ("own@sha256-1", own)
    assert shelf.get("own@sha256-1")[1] is own
    for ref in ("a@1", "b@1", "a@1", "c@1", "a@1"):
        version, animator = shelf.get(ref)
        assert version == ref and cast(Any, animator).ref == ref
    assert loads == ["a@1", "b@1", "c@1"]  # a stayed (recently used), b was dropped
    assert shelf.versions == ["own@sha256-1", "c@1", "a@1"]
    with pytest.raises(ModelError):
        shelf.get("bad@1")


def test_the_workers_own_model_is_named_by_its_content(shipped_model: Path) -> None:
    digest = content_hash(directory_files(shipped_model))
    assert own_version(shipped_model, "x") == f"{shipped_model.name}@sha256-{digest[:12]}"
    assert own_version(Path("/nonexistent"), "standin") == "standin@local"
    settings = WorkerSettings(models=" a@1, b@2 ,")  # type: ignore[call-arg]
    assert boot_versions(settings) == ["a@1", "b@2"]
