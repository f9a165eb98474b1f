"""Build the store a region's settings describe."""

from __future__ import annotations

from animfleet.topology import StorageConfig
from storage.base import ObjectStore
from storage.local import LocalStore
from storage.s3 import S3Store


def open_store(config: StorageConfig) -> ObjectStore:
    if config.backend == "local":
        return LocalStore(config.root)
    secret = config.secret_access_key.get_secret_value() if config.secret_access_key else None
    return S3Store(
        bucket=config.bucket,
        endpoint_url=config.endpoint_url,
        region_name=config.region_name,
        access_key_id=config.access_key_id,
        secret_access_key=secret,
    )
