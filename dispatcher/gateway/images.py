"""The ``image`` field of a request: a URL (fetched behind the network guard), a base64 data
URI, or a storage key under ``inputs/``."""

from __future__ import annotations

import base64
import binascii
import re

from animfleet.netguard import BlockedURL, FetchFailed, NetGuard
from dispatcher.inputs import MAX_IMAGE_BYTES, InvalidInput
from storage import ObjectStore, StorageError

DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w=.+-]+)*),", re.ASCII)
STORAGE_KEY = re.compile(r"^inputs/[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$")
FETCH_TIMEOUT_S = 10.0


def resolve_image(value: str, netguard: NetGuard, objects: ObjectStore) -> bytes:
    """The image bytes ``value`` names; raises :class:`InvalidInput` on field ``image``."""
    if value.startswith("data:"):
        return _decode_data_uri(value)
    if value.startswith(("http://", "https://")) or "://" in value:
        try:
            return netguard.fetch(value, max_bytes=MAX_IMAGE_BYTES, timeout_s=FETCH_TIMEOUT_S)
        except BlockedURL as error:
            raise InvalidInput("image", f"URL refused: {error}") from None
        except FetchFailed as error:
            raise InvalidInput("image", f"could not fetch {value[:200]!r}: {error}") from None
    if STORAGE_KEY.match(value) and ".." not in value.split("/"):
        try:
            return objects.get(value)
        except (StorageError, KeyError, FileNotFoundError) as error:
            raise InvalidInput(
                "image", f"storage key {value!r} could not be read: {error}"
            ) from None
    raise InvalidInput(
        "image",
        f"must be an http(s) URL, a base64 data URI or a storage key under inputs/ "
        f"(got {value[:60]!r})",
    )


def _decode_data_uri(value: str) -> bytes:
    match = DATA_URI.match(value)
    if match is None or ";base64" not in (match.group("params") or ""):
        raise InvalidInput("image", "a data URI must look like data:image/png;base64,<data>")
    payload = value[match.end() :]
    if len(payload) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        raise InvalidInput("image", f"is larger than the limit of {MAX_IMAGE_BYTES} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("image", "the data URI's payload is not valid base64") from None
