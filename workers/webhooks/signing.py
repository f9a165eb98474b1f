"""Standard Webhooks signatures (standardwebhooks.com): ``v1,<base64 HMAC-SHA256>``.

The signed content is ``"{webhook-id}.{webhook-timestamp}.{body}"``; the key is the base64
part of a ``whsec_`` secret. With several active secrets (rotation) the header carries one
signature per secret, space-separated, and receivers accept any that verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from animfleet.errors import PermanentError
from workers.errors import WorkerError

SECRET_PREFIX = "whsec_"


class InvalidSecret(WorkerError, PermanentError, ValueError):
    """A webhook secret that is not ``whsec_`` + base64 of 24-64 bytes."""


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_...`` secret; raises :class:`InvalidSecret` (never echoing it)."""
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidSecret("a webhook secret must start with 'whsec_'")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("a webhook secret must be 'whsec_' + base64") from None
    if not 24 <= len(key) <= 64:
        raise InvalidSecret(f"a webhook secret must hold 24-64 bytes, this one holds {len(key)}")
    return key


def sign(keys: list[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value: one ``v1,<sig>`` per key, space-separated."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    signatures = (
        base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode() for key in keys
    )
    return " ".join(f"v1,{signature}" for signature in signatures)
