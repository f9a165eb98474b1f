"""Boot to ready: each stage's seconds logged as ``worker.boot`` and exported as
``animfleet_worker_boot_seconds{stage}``; boot versions fetched once, timed, counted."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from animfleet.region.catalog import CatalogEntry, ModelCatalog
from animfleet.topology import Region, StorageConfig
from storage.local import LocalStore
from storage.registry import ModelRegistry
from workers import served_versions
from workers.boot_clock import BootClock


def _boot_seconds(region: str, stage: str) -> float | None:
    labels = {"region": region, "stage": stage}
    return REGISTRY.get_sample_value("animfleet_worker_boot_seconds", labels)


def test_each_stage_is_logged_and_exported() -> None:
    clock = BootClock(started=time.monotonic() - 5.0, fetch_s=1.5, fetched_bytes=3, reused_bytes=2)
    with capture_logs() as logs:
        clock.report("boot-a", load_s=2.0, warmup_s=0.25, metrics=True)
    (event,) = [entry for entry in logs if entry["event"] == "worker.boot"]
    assert event["fetch_s"] == 1.5 and event["load_s"] == 2.0 and event["warmup_s"] == 0.25
    assert 5.0 <= event["ready_s"] < 60 and event["fetched_bytes"] == 3
    assert _boot_seconds("boot-a", "fetch") == 1.5
    assert _boot_seconds("boot-a", "load") == 2.0
    assert _boot_seconds("boot-a", "warmup") == 0.25
    ready = _boot_seconds("boot-a", "ready")
    assert ready is not None and ready >= 5.0
    with capture_logs():
        clock.report("boot-b", load_s=1.0, warmup_s=0.0, metrics=False)
    assert _boot_seconds("boot-b", "load") is None  # no metrics port: logged only


def test_boot_versions_are_fetched_timed_and_verified_once(
    redis_client: redis.Redis,
    store_region: Callable[[str], Region],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = BootClock()
    monkeypatch.setattr(served_versions, "CLOCK", clock)
    monkeypatch.setattr(served_versions, "_VERIFIED_AT_BOOT", {})
    model = tmp_path / "model"
    (model / "unet").mkdir(parents=True)
    (model / "unet" / "weights.safetensors").write_bytes(os.urandom(300_000))
    (model / "model_index.json").write_text("{}")
    storage = StorageConfig(backend="local", root=str(tmp_path / "bucket"))
    region = store_region("boot").model_copy(update={"storage": storage})
    objects = LocalStore(tmp_path / "bucket")
    manifest = ModelRegistry(objects, storage.prefix).push(model, "m@1")
    ModelCatalog(redis_client, "boot").add(
        CatalogEntry(ref="m@1", hash=manifest.hash, bytes=manifest.bytes, files=2)
    )
    cache = tmp_path / "cache"
    (path,) = served_versions.fetch_boot(["m@1"], region, redis_client, objects, cache)
    assert path == cache / manifest.hash
    assert clock.fetched_bytes == manifest.bytes and clock.reused_bytes == 0
    assert clock.fetch_s > 0
    # The pool child (forked: it shares this module's state) loads it without hashing its
    # files again: even a file changed since is not looked at.
    (path / "model_index.json").write_text('{"changed": true}')
    assert served_versions.fetch_version("m@1", region, redis_client, objects, cache) == path
    assert (path / "model_index.json").read_text() == '{"changed": true}'
    # Outside the boot list, a cached copy is verified: the change is found and fetched again.
    monkeypatch.setattr(served_versions, "_VERIFIED_AT_BOOT", {})
    assert served_versions.fetch_version("m@1", region, redis_client, objects, cache) == path
    assert (path / "model_index.json").read_text() == "{}"
