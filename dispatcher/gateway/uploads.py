"""``POST /v1/uploads``: put an image in the region's storage once, then name it in jobs.

Two ways in: a presigned upload (the client POSTs the file straight to object storage, which
enforces the size range, content type, key and expiry of the signed policy), or the bytes sent
to the gateway (``POST /v1/uploads/direct``, checked here: at most
:data:`dispatcher.inputs.MAX_IMAGE_BYTES`, a PNG, JPEG or WebP that decodes). Either way the
answer's ``key`` (``inputs/uploads/<tenant>/<token>.<ext>``) is usable as a job's ``image``,
``mask`` or an add-on's ``image``, by the tenant that uploaded it only.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

import anyio.to_thread
from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import ClientDisconnect

from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.errors import ApiError
from dispatcher.gateway.images import EXTENSIONS, new_upload_key
from dispatcher.gateway.views import error_responses, runtime_of
from dispatcher.inputs import MAX_IMAGE_BYTES, check_image
from storage import PostSigner

UPLOAD_EXPIRY_S = 300  # a presigned upload is usable this long
UploadType = Literal["image/png", "image/jpeg", "image/webp"]
FORMAT_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}

router = APIRouter(prefix="/v1", tags=["uploads"])
_ERRORS = error_responses(400, 401, 409, 413, 422, 429, 503)


class UploadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content_type: UploadType = Field(description="the file's type; the upload must send it")


class PresignedUpload(BaseModel):
    key: str = Field(description="pass as `image`, `mask` or an add-on's `image` in a job")
    url: str = Field(description="POST here as multipart/form-data")
    fields: dict[str, str] = Field(description="form fields to send as given, before `file`")
    max_bytes: int = Field(description="the largest file storage accepts under this policy")
    expires_at: float = Field(description="unix seconds; the upload is refused after this")


class StoredUpload(BaseModel):
    key: str = Field(description="pass as `image`, `mask` or an add-on's `image` in a job")
    content_type: str
    bytes: int


@router.post(
    "/uploads",
    response_model=PresignedUpload,
    status_code=201,
    responses=_ERRORS,
    operation_id="createUpload",
)
def create_upload(body: UploadRequest, request: Request, caller: CallerDep) -> PresignedUpload:
    """A presigned upload for one image: POST ``fields`` and then the file (form field
    ``file``) to ``url``; storage refuses a file over ``max_bytes``, of another type, or after
    ``expires_at``. A region whose storage cannot sign uploads answers 409
    ``presign_unsupported``: send the bytes to
    ``POST /v1/uploads/direct`` instead."""
    runtime = runtime_of(request)
    store = runtime.objects(runtime.settings.region)
    if not isinstance(store, PostSigner):
        raise ApiError(
            409,
            "presign_unsupported",
            "this region's storage cannot sign uploads; POST the bytes to /v1/uploads/direct",
        )
    key = new_upload_key(caller.tenant, body.content_type)
    post = store.presigned_post(key, body.content_type, MAX_IMAGE_BYTES, UPLOAD_EXPIRY_S)
    return PresignedUpload(
        key=key,
        url=post.url,
        fields=post.fields,
        max_bytes=MAX_IMAGE_BYTES,
        expires_at=time.time() + UPLOAD_EXPIRY_S,
    )


@router.post(
    "/uploads/direct",
    response_model=StoredUpload,
    status_code=201,
    responses=_ERRORS,
    operation_id="uploadDirect",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {t: {"schema": {"type": "string", "format": "binary"}} for t in EXTENSIONS},
        }
    },
)
async def upload_direct(
    request: Request,
    caller: CallerDep,
    content_type: Annotated[str, Header(alias="Content-Type")],
) -> StoredUpload:
    """Store the request body (a PNG, JPEG or WebP, at most 10 MiB) as an upload."""
    declared = content_type.split(";")[0].strip().lower()
    if declared not in EXTENSIONS:
        message = f"Content-Type: must be one of {', '.join(EXTENSIONS)} (got {declared!r})"
        raise ApiError(422, "invalid_input", message, "Content-Type")
    data = bytearray()
    try:
        async for chunk in request.stream():
            data.extend(chunk)
            if len(data) > MAX_IMAGE_BYTES:
                message = f"body: is over the limit of {MAX_IMAGE_BYTES} bytes"
                raise ApiError(413, "body_too_large", message, "body")
    except ClientDisconnect:  # gone, or cut off at the body's deadline (answered 408 there)
        raise ApiError(408, "request_timeout", "body: did not arrive in full", "body") from None
    # Off the event loop: a large image's check takes a while (bounded by the pixel budget).
    fmt, _, _ = await anyio.to_thread.run_sync(check_image, bytes(data), "body")
    if FORMAT_TYPES.get(fmt) != declared:
        message = f"body: is a {fmt} image, not {declared} as Content-Type says"
        raise ApiError(422, "invalid_input", message, "body")
    runtime = runtime_of(request)
    store = runtime.objects(runtime.settings.region)
    key = new_upload_key(caller.tenant, declared)
    await anyio.to_thread.run_sync(store.put, key, bytes(data), declared)
    return StoredUpload(key=key, content_type=declared, bytes=len(data))
