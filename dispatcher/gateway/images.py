"""The ``image`` field of a request: a URL (fetched behind the network guard), a base64 data
URI, or a storage key under ``inputs/``.

A URL is fetched in the request's own thread, so slow origins could hold every thread of the
gateway: :class:`FetchSlots` lets only a few requests fetch at once, fewer per tenant, and
refuses the rest at once with 429 and ``Retry-After``, so the other threads keep serving.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from animfleet.netguard import BlockedURL, FetchFailed, NetGuard
from dispatcher.gateway.errors import ApiError
from dispatcher.inputs import MAX_IMAGE_BYTES, InvalidInput
from storage import ObjectStore, StorageError

DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w=.+-]+)*),", re.ASCII)
STORAGE_KEY = re.compile(r"^inputs/[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$")
FETCH_TIMEOUT_S = 10.0
# Uploads live under one prefix per tenant; only that tenant may name them in a job.
UPLOADS_PREFIX = "inputs/uploads/"
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}
_UPLOAD_KEY = re.compile(r"^inputs/uploads/(?P<tenant>[^/]+)/[A-Za-z0-9_-]+\.(png|jpg|webp)$")


def new_upload_key(tenant: str, content_type: str) -> str:
    """A fresh key for one of ``tenant``'s uploads of ``content_type`` (one of EXTENSIONS)."""
    return f"{UPLOADS_PREFIX}{tenant}/{secrets.token_urlsafe(16)}.{EXTENSIONS[content_type]}"


def upload_owner(key: str) -> str | None:
    """The tenant an upload key belongs to; None for a key that is not an upload's."""
    match = _UPLOAD_KEY.match(key)
    return match.group("tenant") if match else None


def upload_keys_in(value: object) -> set[str]:
    """Every upload key a request body names (image, mask, add-on images, region masks)."""
    if isinstance(value, str):
        return {value} if value.startswith(UPLOADS_PREFIX) else set()
    if isinstance(value, dict):
        return set().union(*(upload_keys_in(item) for item in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(upload_keys_in(item) for item in value))
    return set()


class FetchSlots:
    """How many requests may be fetching an image URL at once: in all, and per tenant."""

    def __init__(self, total: int, per_tenant: int) -> None:
        self.total, self.per_tenant = total, per_tenant
        self._lock = threading.Lock()
        self._busy = 0
        self._by_tenant: defaultdict[str, int] = defaultdict(int)

    @contextmanager
    def slot(self, tenant: str) -> Iterator[None]:
        """Hold a slot while fetching; raises a 429 :class:`ApiError` when none is free."""
        with self._lock:
            if self._busy >= self.total or self._by_tenant[tenant] >= self.per_tenant:
                raise ApiError(
                    429,
                    "fetch_busy",
                    "too many image URLs are being fetched right now; retry shortly, or send "
                    "the image inline (a data URI) or as a storage key",
                    "image",
                    retry_after_s=1,
                )
            self._busy += 1
            self._by_tenant[tenant] += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._by_tenant[tenant] -= 1
                if not self._by_tenant[tenant]:
                    del self._by_tenant[tenant]


def resolve_image(
    value: str,
    netguard: NetGuard,
    objects: ObjectStore,
    slots: FetchSlots | None = None,
    tenant: str = "default",
    field: str = "image",
) -> bytes:
    """The bytes ``value`` names; raises :class:`InvalidInput` on ``field`` (``image``, or
    ``mask``, which travels the same ways)."""
    if value.startswith("data:"):
        return _decode_data_uri(value, field)
    if value.startswith(("http://", "https://")) or "://" in value:
        try:
            with slots.slot(tenant) if slots is not None else _no_slot():
                return netguard.fetch(value, max_bytes=MAX_IMAGE_BYTES, timeout_s=FETCH_TIMEOUT_S)
        except BlockedURL as error:
            raise InvalidInput(field, f"URL refused: {error}") from None
        except FetchFailed as error:
            raise InvalidInput(field, f"could not fetch {value[:200]!r}: {error}") from None
    if STORAGE_KEY.match(value) and ".." not in value.split("/"):
        return _read_key(value, objects, tenant, field)
    raise InvalidInput(
        field,
        f"must be an http(s) URL, a base64 data URI or a storage key under inputs/ "
        f"(got {value[:60]!r})",
    )


def _read_key(key: str, objects: ObjectStore, tenant: str, field: str) -> bytes:
    """An object under ``inputs/``: another tenant's upload reads as missing; one over the
    image limit is refused before it is read."""
    missing = f"storage key {key!r} could not be read: no such object"
    if key.startswith(UPLOADS_PREFIX) and upload_owner(key) != tenant:
        raise InvalidInput(field, missing)
    try:
        info = objects.head(key)
        if info is None:
            raise InvalidInput(field, missing)
        if info.size > MAX_IMAGE_BYTES:
            raise InvalidInput(
                field, f"storage key {key!r} is {info.size} bytes; the limit is {MAX_IMAGE_BYTES}"
            )
        return objects.get(key)
    except (StorageError, KeyError, FileNotFoundError) as error:
        raise InvalidInput(field, f"storage key {key!r} could not be read: {error}") from None


def _decode_data_uri(value: str, field: str) -> bytes:
    match = DATA_URI.match(value)
    if match is None or ";base64" not in (match.group("params") or ""):
        raise InvalidInput(field, "a data URI must look like data:image/png;base64,<data>")
    payload = value[match.end() :]
    if len(payload) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        raise InvalidInput(field, f"is larger than the limit of {MAX_IMAGE_BYTES} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(field, "the data URI's payload is not valid base64") from None


def resolve_addon_images(
    options: dict[str, Any],
    netguard: NetGuard,
    objects: ObjectStore,
    slots: FetchSlots | None = None,
    tenant: str = "default",
) -> None:
    """Replace each add-on's ``image`` and each brushed region's ``mask`` in ``options`` (a
    URL, data URI or storage key, like the job's image) by its bytes; errors name
    ``addons.<i>.image`` and ``regions.<i>.mask``."""
    for index, addon in enumerate(options.get("addons") or ()):
        value = addon.get("image") if isinstance(addon, dict) else None
        if isinstance(value, str):
            addon["image"] = resolve_image(
                value, netguard, objects, slots, tenant, field=f"addons.{index}.image"
            )
    # Each brushed region's mask travels the same ways (errors name regions.<i>.mask).
    for index, region in enumerate(options.get("regions") or ()):
        value = region.get("mask") if isinstance(region, dict) else None
        if isinstance(value, str):
            region["mask"] = resolve_image(
                value, netguard, objects, slots, tenant, field=f"regions.{index}.mask"
            )


@contextmanager
def _no_slot() -> Iterator[None]:
    yield
