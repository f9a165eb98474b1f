"""The one interface every storage backend offers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from animfleet.errors import AnimfleetError, NotFound, PermanentError, TransientError


class StorageError(AnimfleetError, RuntimeError):
    """The base of the storage package's errors."""


class StorageRejected(StorageError, PermanentError):
    """A storage operation failed for a reason retrying will not fix (bad key, denied)."""


class StorageNotFound(StorageRejected, NotFound):
    """A definite answer: no object at that key (S3's 404 ``NoSuchKey``, no such file).
    Only this answer may be taken as "there is none"; a throttle (503), a timeout or a refused
    connection is :class:`StorageUnavailable`, which says nothing about the object."""


class StorageUnavailable(StorageError, TransientError):
    """Storage could not be reached or answered 5xx; the caller should retry later."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    content_type: str


class ObjectStore(Protocol):
    """Put and fetch whole objects by key; hand out time-limited read URLs."""

    def put(self, key: str, data: bytes, content_type: str) -> ObjectInfo: ...

    def get(self, key: str) -> bytes: ...

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes of the object at ``key`` from byte ``offset`` (fewer only at its
        end); what parallel fetches of multi-GB blobs are made of. Raises
        :class:`StorageRejected` when there is no such object."""
        ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def delete(self, key: str) -> None: ...

    def list_keys(self, prefix: str) -> list[str]: ...

    def presigned_url(self, key: str, expires_in: int) -> str: ...


@dataclass(frozen=True)
class PresignedPost:
    """A browser-style upload: POST ``fields`` plus the file (form field ``file``, last) to
    ``url`` as multipart/form-data; the server enforces the size range, content type, key and
    expiry the policy names."""

    url: str
    fields: dict[str, str]


@runtime_checkable
class PostSigner(Protocol):
    """A store that can hand out a presigned upload for one key (S3; not a local directory)."""

    def presigned_post(
        self, key: str, content_type: str, max_bytes: int, expires_in: int
    ) -> PresignedPost: ...
