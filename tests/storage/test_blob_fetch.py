"""Fetching a version's blobs: concurrent ranged reads, hashes checked, resumed after a kill,
one process at a time per version on a host; on a local directory and a real SeaweedFS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.local_fleet import LocalFleet
from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY
from storage.base import ObjectStore, StorageUnavailable
from storage.local import LocalStore
from storage.registry import Manifest, ModelIntegrityError, ModelRegistry, directory_files
from storage.s3 import S3Store

PART = 64 * 1024
SIZES = {"model_index.json": 120, "empty.txt": 0, "unet/a.safetensors": 5 * PART + 17}
SIZES["vae/b.safetensors"] = 3 * PART  # a whole number of parts


def _bucket_name(tmp_path: Path) -> str:
    return f"fetch-{tmp_path.name.lower().replace('_', '-')[-40:]}"


def _s3(servers: LocalFleet, bucket: str) -> S3Store:
    s3 = S3Store(
        bucket=bucket,
        endpoint_url=servers.s3_endpoint,
        access_key_id=S3_ACCESS_KEY,
        secret_access_key=S3_SECRET_KEY,
    )
    s3.ensure_bucket()
    return s3


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    for name, size in SIZES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(os.urandom(size))
    return root


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalStore(tmp_path / "bucket")
    else:
        yield _s3(request.getfixturevalue("servers"), _bucket_name(tmp_path))


def _same_files(path: Path, model_dir: Path) -> None:
    assert directory_files(path) == directory_files(model_dir)
    for name in SIZES:
        assert (path / name).read_bytes() == (model_dir / name).read_bytes()


def test_ranged_fetch_equals_the_blobs(store: ObjectStore, model_dir: Path, tmp_path: Path) -> None:
    manifest = ModelRegistry(store).push(model_dir, "m@1")
    registry = ModelRegistry(store, part_bytes=PART, threads=4)
    path = registry.fetch("m@1", tmp_path / "cache", manifest.hash)
    _same_files(path, model_dir)
    assert registry.last_fetch is not None
    assert registry.last_fetch.downloaded == manifest.bytes and registry.last_fetch.reused == 0
    assert os.listdir(tmp_path / "cache") == [manifest.hash]  # no staging, no journal left
    assert registry.fetch("m@1", tmp_path / "cache") == path and registry.last_fetch is None


class FailingAfter(LocalStore):
    """A local bucket whose ranged reads fail once ``budget`` of them have been served."""

    def __init__(self, root: Path, budget: int) -> None:
        super().__init__(root)
        self.budget, self.reads = budget, 0
        self.lock = threading.Lock()

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        with self.lock:
            self.reads += 1
            if self.reads > self.budget:
                raise StorageUnavailable("storage went away mid-fetch")
        return super().read_range(key, offset, length)


def _interrupted(model_dir: Path, tmp_path: Path, budget: int) -> tuple[Manifest, Path]:
    """A version pushed to a local bucket and a fetch of it stopped after ``budget`` reads."""
    bucket = tmp_path / "bucket"
    manifest = ModelRegistry(LocalStore(bucket)).push(model_dir, "m@1")
    failing = ModelRegistry(FailingAfter(bucket, budget), part_bytes=PART, threads=1)
    with pytest.raises(StorageUnavailable):
        failing.fetch("m@1", tmp_path / "cache")
    staging = tmp_path / "cache" / f".partial-{manifest.hash}"
    assert staging.is_dir() and not (tmp_path / "cache" / manifest.hash).exists()
    return manifest, staging


def test_an_interrupted_fetch_resumes_with_only_the_missing_parts(
    model_dir: Path, tmp_path: Path
) -> None:
    # Sorted files: empty.txt (no read), model_index.json (1), unet/a (6 parts), vae/b (3).
    manifest, _ = _interrupted(model_dir, tmp_path, budget=4)
    done = 120 + 3 * PART  # model_index.json and three parts of unet/a landed
    registry = ModelRegistry(LocalStore(tmp_path / "bucket"), part_bytes=PART, threads=3)
    path = registry.fetch("m@1", tmp_path / "cache", manifest.hash)
    _same_files(path, model_dir)
    assert registry.last_fetch is not None
    assert registry.last_fetch.reused == done
    assert registry.last_fetch.downloaded == manifest.bytes - done
    assert registry.last_fetch.refetched == []
    assert os.listdir(tmp_path / "cache") == [manifest.hash]


def test_a_damaged_partial_is_discarded_and_fetched_again(model_dir: Path, tmp_path: Path) -> None:
    manifest, staging = _interrupted(model_dir, tmp_path, budget=4)
    with (staging / "unet/a.safetensors").open("r+b") as staged:  # a journalled part rots
        staged.seek(PART + 5)
        staged.write(b"\xff\x00\xff")
    registry = ModelRegistry(LocalStore(tmp_path / "bucket"), part_bytes=PART, threads=2)
    path = registry.fetch("m@1", tmp_path / "cache", manifest.hash)
    _same_files(path, model_dir)
    assert registry.last_fetch is not None
    assert registry.last_fetch.refetched == ["unet/a.safetensors"]


def test_a_blob_that_does_not_match_is_refused_and_not_kept(
    store: ObjectStore, model_dir: Path, tmp_path: Path
) -> None:
    registry = ModelRegistry(store, part_bytes=PART, threads=4)
    manifest = registry.push(model_dir, "m@1")
    unet = next(file for file in manifest.files if file.path == "unet/a.safetensors")
    tampered = bytearray((model_dir / unet.path).read_bytes())
    tampered[4 * PART] ^= 1  # one bit in the fifth part
    store.put(registry.blob_key(unet.sha256), bytes(tampered), "application/octet-stream")
    with pytest.raises(ModelIntegrityError, match=f"unet/a.safetensors has sha256 .*{unet.sha256}"):
        registry.fetch("m@1", tmp_path / "cache")
    assert os.listdir(tmp_path / "cache") == []  # neither installed nor kept to resume


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.02)


def _blocked_on_flock(pid: int) -> bool:
    """Whether ``pid`` waits for a flock (``/proc/locks`` lists waiters after ``->``)."""
    rows = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    return any(row[1:3] == ["->", "FLOCK"] and str(pid) in row for row in rows)


def test_a_killed_fetch_is_resumed_by_the_process_waiting_for_it(
    servers: LocalFleet, model_dir: Path, tmp_path: Path
) -> None:
    bucket = _bucket_name(tmp_path)
    manifest = ModelRegistry(_s3(servers, bucket)).push(model_dir, "m@1")
    cache = tmp_path / "cache"
    journal = cache / f".partial-{manifest.hash}" / ".parts.jsonl"

    def child(stall_after: int) -> subprocess.Popen[str]:
        argv = [servers.s3_endpoint, bucket, "m@1", str(cache), str(PART), str(stall_after)]
        return subprocess.Popen(
            [sys.executable, "-m", "tests.storage.fetch_child", *argv],
            stdout=subprocess.PIPE if stall_after == 0 else subprocess.DEVNULL,
            text=True,
        )

    # Five reads land (with the empty file, six journal lines); the sixth hangs, lock held.
    first = child(stall_after=5)
    try:
        _wait(lambda: journal.is_file() and len(journal.read_text().splitlines()) == 6, "6 parts")
        second = child(stall_after=0)
        _wait(lambda: _blocked_on_flock(second.pid), "the second fetch waiting for the first")
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0
    stats = json.loads(out)
    # model_index.json (120 bytes) and four parts of unet/a were journalled before the kill.
    assert stats == {
        "path": str(cache / manifest.hash),
        "downloaded": manifest.bytes - 120 - 4 * PART,
        "reused": 120 + 4 * PART,
    }
    _same_files(cache / manifest.hash, model_dir)
    assert os.listdir(cache) == [manifest.hash]
