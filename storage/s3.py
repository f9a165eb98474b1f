"""S3 through boto3: AWS, SeaweedFS, MinIO, R2 — any endpoint that speaks the API."""

from __future__ import annotations

import io
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from storage.base import (
    ObjectInfo,
    PresignedPost,
    StorageError,
    StorageNotFound,
    StorageRejected,
    StorageUnavailable,
)

# Parts of 8 MiB above 16 MiB: outputs are small MP4s, so most uploads are a single PUT.
_TRANSFER = TransferConfig(multipart_threshold=16 * 2**20, multipart_chunksize=8 * 2**20)


NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}


def _error_code(error: Exception) -> str:
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def _translate(error: Exception, what: str) -> StorageError:
    if isinstance(error, ClientError):
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        code = error.response.get("Error", {}).get("Code", "")
        if code in NOT_FOUND_CODES:
            return StorageNotFound(f"{what}: {code}")
        if status >= 500 or code in {"SlowDown", "ServiceUnavailable", "InternalError"}:
            return StorageUnavailable(f"{what}: {code or status}")
        return StorageRejected(f"{what}: {code or status}")
    return StorageUnavailable(f"{what}: {error}")


class S3Store:
    """One bucket; keys are used as given (callers add the region's prefix)."""

    def __init__(
        self,
        bucket: str,
        endpoint_url: str | None = None,
        region_name: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        connect_timeout: float = 3.0,
        read_timeout: float = 30.0,
    ) -> None:
        self.bucket = bucket
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": 3, "mode": "standard"},
            signature_version="s3v4",
            s3={"addressing_style": "path"} if endpoint_url else {},
            # Model fetches read one blob with many ranged GETs at once (storage/blob_fetch.py).
            max_pool_connections=32,
        )
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region_name,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=config,
        )

    def ensure_bucket(self) -> None:
        """Create the bucket if it is missing (local and test deployments)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self.client.create_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as error:
                raise _translate(error, f"create bucket {self.bucket}") from error
        except BotoCoreError as error:
            raise _translate(error, f"head bucket {self.bucket}") from error

    def put(self, key: str, data: bytes, content_type: str) -> ObjectInfo:
        try:
            self.client.upload_fileobj(
                io.BytesIO(data),
                self.bucket,
                key,
                ExtraArgs={"ContentType": content_type},
                Config=_TRANSFER,
            )
        except (ClientError, BotoCoreError) as error:
            raise _translate(error, f"put {key}") from error
        return ObjectInfo(key=key, size=len(data), content_type=content_type)

    def get(self, key: str) -> bytes:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except (ClientError, BotoCoreError) as error:
            raise _translate(error, f"get {key}") from error
        return body

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        last = offset + length - 1
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{last}"
            )
            body: bytes = response["Body"].read()
        except (ClientError, BotoCoreError) as error:
            if _error_code(error) == "InvalidRange":  # from at or past the end: nothing left
                return b""
            raise _translate(error, f"get {key} bytes {offset}-{last}") from error
        return body

    def head(self, key: str) -> ObjectInfo | None:
        try:
            meta = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in NOT_FOUND_CODES:
                return None
            raise _translate(error, f"head {key}") from error
        except (BotoCoreError, EndpointConnectionError) as error:
            raise _translate(error, f"head {key}") from error
        return ObjectInfo(
            key=key, size=int(meta["ContentLength"]), content_type=meta["ContentType"]
        )

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as error:
            raise _translate(error, f"delete {key}") from error

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        except (ClientError, BotoCoreError) as error:
            raise _translate(error, f"list {prefix}") from error
        return sorted(keys)

    def presigned_url(self, key: str, expires_in: int) -> str:
        url: str = self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_in
        )
        return url

    def presigned_post(
        self, key: str, content_type: str, max_bytes: int, expires_in: int
    ) -> PresignedPost:
        """A POST policy for exactly ``key``, 1..``max_bytes`` bytes of ``content_type``."""
        post: dict[str, Any] = self.client.generate_presigned_post(
            self.bucket,
            key,
            Fields={"Content-Type": content_type},
            Conditions=[["content-length-range", 1, max_bytes], {"Content-Type": content_type}],
            ExpiresIn=expires_in,
        )
        return PresignedPost(url=post["url"], fields=dict(post["fields"]))
