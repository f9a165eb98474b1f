"""Both backends behave the same; S3 runs against a real SeaweedFS server."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.local_fleet import LocalFleet
from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY
from storage import ObjectStore, StorageError, StorageUnavailable, output_key
from storage.local import LocalStore
from storage.s3 import S3Store


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalStore(tmp_path / "objects")
        return
    servers: LocalFleet = request.getfixturevalue("servers")
    s3 = S3Store(
        bucket=f"test-{tmp_path.name.lower().replace('_', '-')[-40:]}",
        endpoint_url=servers.s3_endpoint,
        access_key_id=S3_ACCESS_KEY,
        secret_access_key=S3_SECRET_KEY,
    )
    s3.ensure_bucket()
    yield s3


def test_put_head_get_list_delete(store: ObjectStore) -> None:
    key = output_key("p/", "r1.abc")
    assert key == "p/outputs/r1.abc.mp4"
    info = store.put(key, b"\x00mp4" * 100, "video/mp4")
    assert info.size == 400
    head = store.head(key)
    assert head is not None and head.content_type == "video/mp4" and head.size == 400
    assert store.get(key) == b"\x00mp4" * 100
    assert store.list_keys("p/outputs/") == [key]
    store.put(key, b"new", "video/mp4")  # same key: overwritten, still one object
    assert store.list_keys("p/") == [key]
    store.delete(key)
    assert store.head(key) is None and store.list_keys("p/") == []


def test_read_range_returns_the_bytes_asked_for(store: ObjectStore) -> None:
    data = bytes(range(256)) * 40
    store.put("blob", data, "application/octet-stream")
    assert store.read_range("blob", 0, 10) == data[:10]
    assert store.read_range("blob", 1000, 3000) == data[1000:4000]
    assert store.read_range("blob", 10_000, 500) == data[10_000:]  # cut short at the end
    assert store.read_range("blob", len(data), 10) == b""
    with pytest.raises(StorageError):
        store.read_range("absent", 0, 10)


def test_missing_object_is_an_error(store: ObjectStore) -> None:
    with pytest.raises(StorageError):
        store.get("nope/missing.mp4")


def test_presigned_url_serves_the_object_with_expiry(store: ObjectStore) -> None:
    store.put("a/video.mp4", b"payload", "video/mp4")
    url = store.presigned_url("a/video.mp4", expires_in=120)
    if isinstance(store, S3Store):
        assert "X-Amz-Expires=120" in url
    with urllib.request.urlopen(url) as response:
        assert response.read() == b"payload"


def test_local_store_refuses_keys_outside_its_root(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not a valid object key"):
        LocalStore(tmp_path).put("../escape.mp4", b"x", "video/mp4")


def test_unreachable_s3_is_unavailable_not_fatal() -> None:
    s3 = S3Store(bucket="b", endpoint_url="http://127.0.0.1:9", connect_timeout=0.2)
    with pytest.raises(StorageUnavailable):
        s3.put("k", b"x", "video/mp4")
