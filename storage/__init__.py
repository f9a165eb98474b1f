"""Object storage for inputs and outputs: S3 (any endpoint) or a local directory."""

from storage.base import (
    ObjectInfo,
    ObjectStore,
    StorageError,
    StorageRejected,
    StorageUnavailable,
)
from storage.factory import open_store
from storage.keys import output_key

__all__ = [
    "ObjectInfo",
    "ObjectStore",
    "StorageError",
    "StorageRejected",
    "StorageUnavailable",
    "open_store",
    "output_key",
]
