"""Uploads against real SeaweedFS: a presigned POST whose limits storage enforces, the bytes
sent to the gateway, and a key only its own tenant may name in a job."""

from __future__ import annotations

import io
from typing import Any

import httpx
import pytest
import redis
from PIL import Image

from animfleet.region.tenants import Tenants
from dispatcher.inputs import MAX_IMAGE_BYTES
from launcher.local_fleet import LocalFleet
from storage import ObjectStore

DB = 10
REGION = "up"
BUCKET = "animfleet-uploads"


@pytest.fixture(scope="module")
def keys(servers: LocalFleet, s3_gateway: str) -> dict[str, str]:
    tenants = Tenants(redis.Redis(port=servers.redis_port, db=DB))
    return {t: tenants.create_key(t).key for t in ("acme", "globex")}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _png(side: int = 64) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (40, 90, 160)).save(buffer, format="PNG")
    return buffer.getvalue()


def _presign(s3_gateway: str, key: str, content_type: str = "image/png") -> dict[str, Any]:
    answer = httpx.post(
        f"{s3_gateway}/v1/uploads", json={"content_type": content_type}, headers=_auth(key)
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _post_file(
    ticket: dict[str, Any], data: bytes, content_type: str = "image/png"
) -> httpx.Response:
    fields = dict(ticket["fields"])
    fields["Content-Type"] = content_type
    return httpx.post(ticket["url"], data=fields, files={"file": ("f", data, content_type)})


def test_a_presigned_upload_lands_under_the_tenants_own_key(
    s3_gateway: str, keys: dict[str, str], s3_store: ObjectStore
) -> None:
    ticket = _presign(s3_gateway, keys["acme"])
    assert ticket["key"].startswith("inputs/uploads/acme/") and ticket["key"].endswith(".png")
    assert ticket["max_bytes"] == MAX_IMAGE_BYTES
    assert _post_file(ticket, _png()).status_code == 204
    assert s3_store.get(ticket["key"]) == _png()


def test_storage_enforces_the_signed_size_type_and_key(
    s3_gateway: str, keys: dict[str, str], s3_store: ObjectStore
) -> None:
    too_big = _post_file(_presign(s3_gateway, keys["acme"]), b"\0" * (MAX_IMAGE_BYTES + 1))
    assert too_big.status_code == 400 and "EntityTooLarge" in too_big.text
    wrong_type = _post_file(_presign(s3_gateway, keys["acme"]), _png(), "text/html")
    assert wrong_type.status_code == 403
    ticket = _presign(s3_gateway, keys["acme"])
    ticket["fields"]["key"] = "inputs/uploads/globex/planted.png"
    assert _post_file(ticket, _png()).status_code == 403
    assert s3_store.head("inputs/uploads/globex/planted.png") is None


def test_presigned_upload_needs_a_key_and_a_known_type(
    s3_gateway: str, keys: dict[str, str]
) -> None:
    assert (
        httpx.post(f"{s3_gateway}/v1/uploads", json={"content_type": "image/png"}).status_code
        == 401
    )
    answer = httpx.post(
        f"{s3_gateway}/v1/uploads", json={"content_type": "text/html"}, headers=_auth(keys["acme"])
    )
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "content_type"


def test_direct_upload_checks_the_bytes(
    s3_gateway: str, keys: dict[str, str], s3_store: ObjectStore
) -> None:
    headers = {**_auth(keys["acme"]), "Content-Type": "image/png"}
    stored = httpx.post(f"{s3_gateway}/v1/uploads/direct", content=_png(), headers=headers)
    assert stored.status_code == 201, stored.text
    assert stored.json()["bytes"] == len(_png()) and s3_store.get(stored.json()["key"]) == _png()
    not_image = httpx.post(f"{s3_gateway}/v1/uploads/direct", content=b"<html>", headers=headers)
    assert not_image.status_code == 422 and not_image.json()["error"]["field"] == "body"
    too_big = httpx.post(
        f"{s3_gateway}/v1/uploads/direct", content=b"\0" * (MAX_IMAGE_BYTES + 1), headers=headers
    )
    assert too_big.status_code == 413
    jpeg = httpx.post(
        f"{s3_gateway}/v1/uploads/direct",
        content=_png(),
        headers={**_auth(keys["acme"]), "Content-Type": "image/jpeg"},
    )
    assert jpeg.status_code == 422 and "PNG" in jpeg.json()["error"]["message"]


def test_another_tenants_upload_reads_as_missing(s3_gateway: str, keys: dict[str, str]) -> None:
    headers = {**_auth(keys["acme"]), "Content-Type": "image/png"}
    key = httpx.post(f"{s3_gateway}/v1/uploads/direct", content=_png(), headers=headers).json()[
        "key"
    ]
    request = {"image": key, "prompt": "pan", "width": 64, "height": 64}
    stolen = httpx.post(f"{s3_gateway}/v1/jobs", json=request, headers=_auth(keys["globex"]))
    assert stolen.status_code == 422, stolen.text
    assert stolen.json()["error"]["field"] == "image" and "no such object" in stolen.text
    own = {**_auth(keys["globex"]), "Content-Type": "image/png"}
    theirs = httpx.post(f"{s3_gateway}/v1/uploads/direct", content=_png(), headers=own).json()[
        "key"
    ]
    mask = httpx.post(
        f"{s3_gateway}/v1/jobs",
        json={**request, "image": theirs, "mask": key},
        headers=_auth(keys["globex"]),
    )
    assert mask.status_code == 422 and mask.json()["error"]["field"] == "mask", mask.text
