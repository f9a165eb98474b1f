"""Object storage for inputs and outputs: S3 (any endpoint) or a local directory."""

from storage.base import (
    ObjectInfo,
    ObjectStore,
    PostSigner,
    PresignedPost,
    StorageError,
    StorageNotFound,
    StorageRejected,
    StorageUnavailable,
)
from storage.factory import open_store
from storage.keys import output_key
from storage.registry import (
    Manifest,
    ModelFile,
    ModelIntegrityError,
    ModelNotFound,
    ModelRegistry,
    content_hash,
    directory_files,
)

__all__ = [
    "Manifest",
    "ModelFile",
    "ModelIntegrityError",
    "ModelNotFound",
    "ModelRegistry",
    "ObjectInfo",
    "ObjectStore",
    "PostSigner",
    "PresignedPost",
    "StorageError",
    "StorageNotFound",
    "StorageRejected",
    "StorageUnavailable",
    "content_hash",
    "directory_files",
    "open_store",
    "output_key",
]
