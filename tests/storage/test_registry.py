"""The model registry: content-addressed blobs, immutable versions, verified fetches."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import workers.model  # noqa: F401  (registers the pipeline's components for from_pretrained)
from animfleet.versions import BadVersionRef
from launcher.local_fleet import LocalFleet
from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY
from storage.base import ObjectInfo
from storage.local import LocalStore
from storage.registry import (
    ModelIntegrityError,
    ModelNotFound,
    ModelRegistry,
    content_hash,
    directory_files,
)
from storage.s3 import S3Store
from workers.model.pipelines.animation import AnimationPipeline


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return _tree(
        tmp_path / "model",
        {"model_index.json": b"{}", "unet/weights.bin": b"u" * 300, "vae/weights.bin": b"v" * 7},
    )


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "bucket")


class CountingStore(LocalStore):
    """Records the key of every put."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []

    def put(self, key: str, data: bytes, content_type: str) -> ObjectInfo:
        self.puts.append(key)
        return super().put(key, data, content_type)


def _blobs(store: LocalStore, prefix: str = "") -> list[str]:
    return store.list_keys(f"{prefix}models/blobs/")


def test_directory_files_sorted_skipping_hidden(model_dir: Path) -> None:
    _tree(model_dir, {".git/config": b"x", "unet/.swp": b"y"})
    files = directory_files(model_dir)
    assert [file.path for file in files] == [
        "model_index.json",
        "unet/weights.bin",
        "vae/weights.bin",
    ]
    assert files[1].sha256 == hashlib.sha256(b"u" * 300).hexdigest() and files[1].bytes == 300
    assert content_hash(files) == content_hash(list(reversed(files)))  # order-free


def test_push_fetch_round_trip_loads_the_shipped_model(
    shipped_model: Path, store: LocalStore, tmp_path: Path
) -> None:
    registry = ModelRegistry(store, prefix="us-east/")
    manifest = registry.push(shipped_model, "animfleet-small-distilled@1")
    assert manifest.hash == content_hash(directory_files(shipped_model))
    assert manifest.bytes == sum(file.bytes for file in manifest.files)
    assert registry.manifest("animfleet-small-distilled@1") == manifest
    assert store.list_keys("us-east/models/versions/") == [
        "us-east/models/versions/animfleet-small-distilled/1.json"
    ]
    path = registry.fetch("animfleet-small-distilled@1", tmp_path / "cache", manifest.hash)
    assert path == tmp_path / "cache" / manifest.hash
    for file in manifest.files:
        assert (path / file.path).read_bytes() == (shipped_model / file.path).read_bytes()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [manifest.hash]  # no temp left
    pipe = AnimationPipeline.from_pretrained(path)
    assert pipe.unet is not None


def test_blobs_are_shared_across_versions(model_dir: Path, tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "bucket")
    registry = ModelRegistry(store)
    first = registry.push(model_dir, "m@1")
    assert len(_blobs(store)) == 3 and store.puts[-1] == "models/versions/m/1.json"  # last
    store.puts.clear()
    assert registry.push(model_dir, "m@2").hash == first.hash
    assert store.puts == ["models/versions/m/2.json"]  # no blob uploaded twice
    (model_dir / "unet/weights.bin").write_bytes(b"U" * 300)  # a retrained U-Net
    store.puts.clear()
    registry.push(model_dir, "m@3")
    assert len(store.puts) == 2 and len(_blobs(store)) == 4
    assert [manifest.ref for manifest in registry.list()] == ["m@1", "m@2", "m@3"]


def test_versions_are_immutable(model_dir: Path, store: LocalStore) -> None:
    registry = ModelRegistry(store)
    first = registry.push(model_dir, "m@1")
    assert registry.push(model_dir, "m@1") == first  # the same content: a no-op
    (model_dir / "vae/weights.bin").write_bytes(b"changed")
    with pytest.raises(ValueError, match="immutable"):
        registry.push(model_dir, "m@1")
    assert registry.manifest("m@1") == first


def test_bad_refs_and_unknown_versions(model_dir: Path, store: LocalStore, tmp_path: Path) -> None:
    registry = ModelRegistry(store)
    with pytest.raises(BadVersionRef):
        registry.push(model_dir, "no-version")
    with pytest.raises(ModelNotFound, match="m@9"):
        registry.fetch("m@9", tmp_path / "cache")
    with pytest.raises(NotADirectoryError):
        registry.push(tmp_path / "missing", "m@1")


def test_a_tampered_blob_is_refused_naming_the_file(
    model_dir: Path, store: LocalStore, tmp_path: Path
) -> None:
    registry = ModelRegistry(store)
    manifest = registry.push(model_dir, "m@1")
    unet = next(file for file in manifest.files if file.path == "unet/weights.bin")
    store.put(registry.blob_key(unet.sha256), b"x" * 300, "application/octet-stream")
    with pytest.raises(ModelIntegrityError) as caught:
        registry.fetch("m@1", tmp_path / "cache")
    message = str(caught.value)
    actual = hashlib.sha256(b"x" * 300).hexdigest()
    assert "m@1" in message and "unet/weights.bin" in message
    assert unet.sha256 in message and actual in message
    assert not (tmp_path / "cache" / manifest.hash).exists()
    assert list((tmp_path / "cache").iterdir()) == []  # the temporary directory is gone


def test_a_tampered_cache_is_fetched_again(
    model_dir: Path, store: LocalStore, tmp_path: Path
) -> None:
    registry = ModelRegistry(store)
    manifest = registry.push(model_dir, "m@1")
    path = registry.fetch("m@1", tmp_path / "cache")
    before = (path / "model_index.json").stat().st_mtime_ns
    assert registry.fetch("m@1", tmp_path / "cache") == path  # verified, not downloaded again
    assert (path / "model_index.json").stat().st_mtime_ns == before
    (path / "unet/weights.bin").write_bytes(b"u" * 299 + b"!")
    (path / "vae/weights.bin").unlink()
    (path / "extra.txt").write_text("not in the manifest")
    assert registry.fetch("m@1", tmp_path / "cache", manifest.hash) == path
    assert directory_files(path) == manifest.files
    assert sorted(os.listdir(tmp_path / "cache")) == [manifest.hash]


def test_an_unexpected_hash_is_refused(model_dir: Path, store: LocalStore, tmp_path: Path) -> None:
    registry = ModelRegistry(store)
    registry.push(model_dir, "m@1")
    with pytest.raises(ModelIntegrityError, match="expected " + "0" * 64):
        registry.fetch("m@1", tmp_path / "cache", expected_hash="0" * 64)
    assert not (tmp_path / "cache").exists()


def test_a_manifest_cannot_write_outside_the_cache(
    model_dir: Path, store: LocalStore, tmp_path: Path
) -> None:
    registry = ModelRegistry(store)
    manifest = registry.push(model_dir, "m@1")
    raw = manifest.model_dump_json().replace('"vae/weights.bin"', '"../../escape.bin"')
    store.put(registry.manifest_key("m@1"), raw.encode(), "application/json")
    with pytest.raises(ModelIntegrityError, match="malformed"):
        registry.fetch("m@1", tmp_path / "cache")


def test_push_and_fetch_through_seaweedfs(
    servers: LocalFleet, model_dir: Path, tmp_path: Path
) -> None:
    s3 = S3Store(
        bucket=f"registry-{tmp_path.name.lower().replace('_', '-')[-40:]}",
        endpoint_url=servers.s3_endpoint,
        access_key_id=S3_ACCESS_KEY,
        secret_access_key=S3_SECRET_KEY,
    )
    s3.ensure_bucket()
    registry = ModelRegistry(s3, prefix="eu/")
    manifest = registry.push(model_dir, "m@1")
    assert registry.push(model_dir, "m@2").hash == manifest.hash
    assert len(s3.list_keys("eu/models/blobs/")) == 3
    assert [found.ref for found in registry.list()] == ["m@1", "m@2"]
    path = registry.fetch("m@2", tmp_path / "cache", manifest.hash)
    assert directory_files(path) == manifest.files
