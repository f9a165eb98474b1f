"""Tenants, their API keys, limits and webhook signing secrets, in one region's Redis.

A key reads ``af_<id>_<secret>``: the id (16 hex digits) finds its record, the secret (256
random bits) is checked against the SHA-256 stored there in constant time. Only the hash is
stored; the whole key is returned once, by :meth:`Tenants.create_key`. A 256-bit random secret
needs no slow hash: nobody can guess one, and the hash only keeps a Redis dump from holding
usable keys.

Webhook signing secrets must be kept in plain form (the sender signs with them); a tenant has
at most two at once, the newest first, so a receiver can rotate without a gap.

The records are per region: ``animfleet keys create`` writes the same key into every region so
that any gateway accepts it (:meth:`Tenants.import_key` copies a record, hash and all).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from animfleet.errors import PermanentError
from animfleet.region.keys import (
    API_KEY,
    TENANT_IN_FLIGHT,
    TENANT_KEY,
    TENANT_KEYS,
    TENANT_SET,
)

KEY_PREFIX = "af"
KEY_ID_HEX = 16
SECRET_BYTES = 32  # 256 bits
WEBHOOK_SECRET_PREFIX = "whsec_"
MAX_WEBHOOK_SECRETS = 2  # the current one and the one it replaced
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # as a job's ``tenant``
_KEY_FORM = re.compile(rf"^{KEY_PREFIX}_([0-9a-f]{{{KEY_ID_HEX}}})_([A-Za-z0-9_-]{{43}})$")


class UnknownKey(PermanentError, LookupError):
    """No key matches: it is malformed, was never issued, or its secret is wrong."""


class RevokedKey(PermanentError, LookupError):
    """The key was issued and then revoked."""

    def __init__(self, key_id: str, tenant: str) -> None:
        super().__init__(key_id)
        self.key_id, self.tenant = key_id, tenant


@dataclass(frozen=True)
class Limits:
    """What one tenant may use. ``None``: no limit of that kind."""

    rate_per_s: float | None = None  # requests per second, the bucket's refill
    burst: int | None = None  # the bucket's size (default: one second's worth, at least 1)
    in_flight: int | None = None  # jobs queued or running at once
    backlog_cap: int | None = None  # jobs waiting in a region's backlog
    weight: float = 1.0  # fair share in the backlog scheduler
    retention_s: float | None = None  # its jobs are erased this long after they end

    def __post_init__(self) -> None:
        for name in ("rate_per_s", "burst", "in_flight", "backlog_cap", "retention_s"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be > 0, got {value}")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ValueError(f"weight must be > 0, got {self.weight}")

    @property
    def bucket_size(self) -> int | None:
        if self.rate_per_s is None:
            return None
        return self.burst if self.burst is not None else max(1, math.ceil(self.rate_per_s))


@dataclass(frozen=True)
class ApiKey:
    """A key's record as stored and listed: never its secret."""

    id: str
    tenant: str
    created_at: float
    name: str = ""
    revoked_at: float | None = None  # may lie ahead: a rotated key's grace period

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None and self.revoked_at <= time.time()


@dataclass(frozen=True)
class IssuedKey:
    """A new key: ``key`` is shown once and never stored."""

    key: str = field(repr=False)  # so that logging the object never shows it
    record: ApiKey
    hash: str = field(repr=False)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_key(key: str) -> str:
    """The id of a well-formed key; raises :class:`UnknownKey` (the key is never in the message)."""
    match = _KEY_FORM.match(key)
    if match is None:
        raise UnknownKey("malformed key")
    return match.group(1)


def mask(key: str) -> str:
    """How a key may be shown in logs: its id prefix only."""
    match = _KEY_FORM.match(key)
    return f"{KEY_PREFIX}_{match.group(1)}_***" if match else "***"


def check_tenant(tenant: str) -> str:
    if not TENANT_NAME.match(tenant):
        raise ValueError(
            f"tenant names are 1-64 of A-Za-z0-9._- (a letter or digit first), got {tenant!r}"
        )
    return tenant


class Tenants:
    """The tenants of one region: keys, limits, webhook secrets."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    # -- keys -----------------------------------------------------------------------------
    def create_key(self, tenant: str, name: str = "") -> IssuedKey:
        """A new key for ``tenant`` (created if new). The returned ``key`` is the only copy."""
        check_tenant(tenant)
        key_id = secrets.token_hex(KEY_ID_HEX // 2)
        key = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
        record = ApiKey(id=key_id, tenant=tenant, created_at=time.time(), name=name)
        issued = IssuedKey(key=key, record=record, hash=key_hash(key))
        self.import_key(record, issued.hash)
        return issued

    def import_key(self, record: ApiKey, hashed: str) -> None:
        """Store a key record issued elsewhere (the same key in another region)."""
        fields = {
            "tenant": record.tenant,
            "hash": hashed,
            "created_at": repr(record.created_at),
            "name": record.name,
        }
        if record.revoked_at is not None:
            fields["revoked_at"] = repr(record.revoked_at)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(API_KEY + record.id, mapping={name: value for name, value in fields.items()})
            pipe.sadd(TENANT_KEYS + record.tenant, record.id)
            pipe.sadd(TENANT_SET, record.tenant)
            pipe.execute()

    def authenticate(self, key: str) -> ApiKey:
        """The record of a valid, unrevoked ``key``. Raises :class:`UnknownKey` or
        :class:`RevokedKey`."""
        key_id = parse_key(key)
        raw = self.redis.hgetall(API_KEY + key_id)
        stored = _text(raw.get(b"hash", b""))
        # compare_digest on equal-length hex: the time taken says nothing about the secret.
        if not stored or not hmac.compare_digest(stored, key_hash(key)):
            raise UnknownKey(key_id)
        record = _key_record(key_id, raw)
        if record.revoked:
            raise RevokedKey(key_id, record.tenant)
        return record

    def keys(self, tenant: str) -> list[ApiKey]:
        """``tenant``'s keys, oldest first, revoked ones included."""
        ids = sorted(_text(i) for i in self.redis.smembers(TENANT_KEYS + tenant))
        with self.redis.pipeline(transaction=False) as pipe:
            for key_id in ids:
                pipe.hgetall(API_KEY + key_id)
            raws = pipe.execute()
        found = [_key_record(i, raw) for i, raw in zip(ids, raws, strict=True) if raw]
        return sorted(found, key=lambda k: (k.created_at, k.id))

    def key(self, key_id: str) -> ApiKey | None:
        raw = self.redis.hgetall(API_KEY + key_id)
        return _key_record(key_id, raw) if raw else None

    def revoke(self, key_id: str, tenant: str | None = None, at: float | None = None) -> ApiKey:
        """Revoke ``key_id`` (at ``at``, default now; a later time leaves it valid until then,
        which is how :meth:`rotate` gives clients a grace period). ``tenant``: refuse a key of
        another tenant. Raises :class:`UnknownKey`."""
        record = self.key(key_id)
        if record is None or (tenant is not None and record.tenant != tenant):
            raise UnknownKey(key_id)
        when = time.time() if at is None else at
        if record.revoked_at is None or when < record.revoked_at:  # only ever sooner
            self.redis.hset(API_KEY + key_id, "revoked_at", repr(when))
        updated = self.key(key_id)
        assert updated is not None
        return updated

    def rotate(self, key_id: str, grace_s: float = 0.0) -> IssuedKey:
        """A new key for the same tenant; the old one stops working after ``grace_s``."""
        record = self.key(key_id)
        if record is None:
            raise UnknownKey(key_id)
        issued = self.create_key(record.tenant, record.name)
        self.revoke(key_id, at=time.time() + grace_s)
        return issued

    def tenants(self) -> list[str]:
        return sorted(_text(t) for t in self.redis.smembers(TENANT_SET))

    # -- limits ---------------------------------------------------------------------------
    def set_limits(self, tenant: str, limits: Limits) -> None:
        check_tenant(tenant)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(TENANT_KEY + tenant, "limits", json.dumps(asdict(limits)))
            pipe.sadd(TENANT_SET, tenant)
            pipe.execute()

    def limits(self, tenant: str) -> Limits:
        """``tenant``'s limits; :class:`Limits` () (none, weight 1) when never set."""
        raw = self.redis.hget(TENANT_KEY + tenant, "limits")
        return Limits(**json.loads(raw)) if raw else Limits()

    # -- jobs in flight (counted in the home region of the gateway that took them) -----------
    def track(self, tenant: str, job_id: str, created_at: float) -> None:
        self.redis.zadd(TENANT_IN_FLIGHT + tenant, {job_id: created_at})

    def in_flight(self, tenant: str) -> list[str]:
        """Ids counted as in flight; some may have finished since (see :meth:`settle`)."""
        found = self.redis.zrange(TENANT_IN_FLIGHT + tenant, 0, -1)
        return [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in found]

    def settle(self, tenant: str, job_ids: list[str]) -> None:
        """Stop counting ``job_ids`` (they finished): the count is cleaned when it matters,
        at the cap, rather than on every job's end."""
        if job_ids:
            self.redis.zrem(TENANT_IN_FLIGHT + tenant, *job_ids)

    def weights(self) -> dict[str, float]:
        """Every tenant's fair-share weight that differs from 1 (for the backlog scheduler)."""
        found = {tenant: self.limits(tenant).weight for tenant in self.tenants()}
        return {tenant: weight for tenant, weight in found.items() if weight != 1.0}

    # -- webhook signing secrets ------------------------------------------------------------
    def rotate_webhook_secret(self, tenant: str, secret: str | None = None) -> str:
        """A new signing secret for ``tenant``'s webhooks (``secret``: one made for another
        region), returned; the previous one still signs until the next rotation, so receivers
        can move without a gap. Standard Webhooks' form: ``whsec_`` + base64 of 32 bytes."""
        check_tenant(tenant)
        if secret is None:
            secret = WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()
        key = TENANT_KEY + tenant

        def change(pipe: redis.client.Pipeline) -> None:
            current = _secret_list(pipe.hget(key, "webhook_secrets"))
            pipe.multi()
            kept = [secret, *current][:MAX_WEBHOOK_SECRETS]
            pipe.hset(key, "webhook_secrets", json.dumps(kept))
            pipe.sadd(TENANT_SET, tenant)

        self.redis.transaction(change, key)
        return secret

    def webhook_secrets(self, tenant: str) -> list[str]:
        """The secrets that sign ``tenant``'s webhooks, newest first (empty: the region's)."""
        return _secret_list(self.redis.hget(TENANT_KEY + tenant, "webhook_secrets"))

    def drop_old_webhook_secret(self, tenant: str) -> None:
        """End the overlap: only the newest secret signs from now on."""
        key = TENANT_KEY + tenant

        def change(pipe: redis.client.Pipeline) -> None:
            current = _secret_list(pipe.hget(key, "webhook_secrets"))
            pipe.multi()
            pipe.hset(key, "webhook_secrets", json.dumps(current[:1]))

        self.redis.transaction(change, key)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _secret_list(raw: Any) -> list[str]:
    return [str(s) for s in json.loads(raw)] if raw else []


def _key_record(key_id: str, raw: Mapping[Any, Any]) -> ApiKey:
    revoked = raw.get(b"revoked_at")
    return ApiKey(
        id=key_id,
        tenant=_text(raw.get(b"tenant", b"")),
        created_at=float(raw.get(b"created_at", b"0")),
        name=_text(raw.get(b"name", b"")),
        revoked_at=float(revoked) if revoked else None,
    )
