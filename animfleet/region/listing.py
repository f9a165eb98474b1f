"""Each tenant's jobs by creation time, for ``GET /v1/jobs``: one sorted set per tenant.

Pages run newest first and continue after a cursor naming the last job returned (its created
time and id), not an offset, so jobs that arrive meanwhile never shift or repeat a page. Equal
times are ordered by id, the order Redis itself gives members of equal score.
"""

from __future__ import annotations

import base64
import binascii
import math
import time
from dataclasses import dataclass

import redis

from animfleet.errors import PermanentError
from animfleet.region.keys import RECORD_TTL_S, TENANT_JOBS

MAX_SCAN = 1000  # ids read from one region for one page at most


class BadCursor(PermanentError, ValueError):
    """A cursor that this module did not make."""


class NonFiniteCursor(BadCursor):
    """A cursor whose created time is ``inf``, ``-inf`` or ``nan``: no page starts there, and
    Redis refuses ``nan`` as a score bound."""

    def __init__(self, cursor: str, created: str) -> None:
        super().__init__(cursor)
        self.cursor, self.created = cursor, created


@dataclass(frozen=True, order=True)
class Position:
    """Where a page stopped: order by created time, then id (both descending in a listing)."""

    created_at: float
    job_id: str

    def cursor(self) -> str:
        raw = f"{self.created_at!r}|{self.job_id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def parse(cls, cursor: str) -> Position:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
            created, _, job_id = raw.partition("|")
            position = cls(float(created), job_id)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise BadCursor(cursor) from None
        if not math.isfinite(position.created_at):
            raise NonFiniteCursor(cursor, created)
        if not job_id:
            raise BadCursor(cursor)
        return position


class Listing:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def add(self, tenant: str, job_id: str, created_at: float) -> None:
        """Index a new job; entries older than a record lives are dropped on the way. (The
        admission script indexes a job admitted in its home region the same way, atomically
        with its record: :mod:`animfleet.region.admission`.)"""
        key = TENANT_JOBS + tenant
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {job_id: created_at}, nx=True)
            pipe.zremrangebyscore(key, "-inf", f"({time.time() - RECORD_TTL_S}")
            pipe.execute()

    def remove(self, tenant: str, job_id: str) -> None:
        """Unlist a deleted job."""
        self.redis.zrem(TENANT_JOBS + tenant, job_id)

    def page(
        self,
        tenant: str,
        limit: int,
        after: Position | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[Position]:
        """Up to ``limit`` of ``tenant``'s jobs, newest first, older than ``after`` (a
        position returned before), created in ``(created_after, created_before)``."""
        key = TENANT_JOBS + tenant
        high = "+inf" if created_before is None else f"({created_before!r}"
        if after is not None:
            high = repr(after.created_at)
            if created_before is not None and created_before <= after.created_at:
                high = f"({created_before!r}"
        low = "-inf" if created_after is None else f"({created_after!r}"
        found: list[Position] = []
        offset = 0
        while len(found) < limit and offset < MAX_SCAN:
            chunk = self.redis.zrevrangebyscore(
                key, high, low, start=offset, num=limit + 1, withscores=True
            )
            for entry in chunk:
                member, score = entry[0], entry[1]
                position = Position(float(score), _text(member))
                if after is None or position < after:
                    found.append(position)
            if len(chunk) <= limit:
                break
            offset += len(chunk)
        return found[:limit]

    def count(self, tenant: str) -> int:
        return int(self.redis.zcard(TENANT_JOBS + tenant))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
