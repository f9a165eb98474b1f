"""A directory on disk as object storage: the embedded default for demos and single hosts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from storage.base import ObjectInfo, StorageNotFound, StorageRejected

_CONTENT_TYPE_SUFFIX = ".content-type"


class LocalStore:
    """Objects are files under ``root``; writes are atomic (temp file + rename).

    ``presigned_url`` returns a ``file://`` URL: there is no server to enforce an expiry, so
    this backend is for one machine only.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents or key.endswith(_CONTENT_TYPE_SUFFIX):
            raise StorageRejected(f"key {key!r} is not a valid object key")
        return path

    def put(self, key: str, data: bytes, content_type: str) -> ObjectInfo:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        path.with_name(path.name + _CONTENT_TYPE_SUFFIX).write_text(content_type)
        return ObjectInfo(key=key, size=len(data), content_type=content_type)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise StorageNotFound(f"no object at key {key!r}") from None

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        try:
            with self._path(key).open("rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except FileNotFoundError:
            raise StorageRejected(f"no object at key {key!r}") from None

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        if not path.is_file():
            return None
        type_file = path.with_name(path.name + _CONTENT_TYPE_SUFFIX)
        content_type = type_file.read_text() if type_file.exists() else "application/octet-stream"
        return ObjectInfo(key=key, size=path.stat().st_size, content_type=content_type)

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        path.with_name(path.name + _CONTENT_TYPE_SUFFIX).unlink(missing_ok=True)

    def list_keys(self, prefix: str) -> list[str]:
        keys = (
            str(path.relative_to(self.root))
            for path in self.root.rglob("*")
            if path.is_file()
            and not path.name.endswith(_CONTENT_TYPE_SUFFIX)
            and not path.name.startswith(".upload-")
        )
        return sorted(key for key in keys if key.startswith(prefix))

    def presigned_url(self, key: str, expires_in: int) -> str:
        del expires_in  # nothing serves these files: see the class docstring
        return self._path(key).as_uri()
