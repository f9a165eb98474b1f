"""Who is calling, and what they may see: API keys, rate limits and job ownership, per tenant.

The gateway authenticates each request here (never touching Redis itself). A key is looked up
in the gateway's own region; ``animfleet keys create`` writes every key into every region, so
any region's gateway accepts it. A job of another tenant is reported exactly like a missing one
(:class:`JobNotFound`), so ids cannot be probed across tenants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from animfleet.errors import PermanentError, TransientError
from animfleet.jobs import JobRecord, JobState
from animfleet.region.jobstore import JobNotFound
from animfleet.region.listing import BadCursor, Listing, NonFiniteCursor, Position
from animfleet.region.ratelimit import Decision, RateLimiter
from animfleet.region.tenants import ApiKey, IssuedKey, RevokedKey, Tenants, UnknownKey
from dispatcher.client import Client
from dispatcher.errors import DispatcherError

MAX_PAGE = 100
PAGE_SCAN = 1000  # records read for one filtered page at most; the cursor goes on from there


class Unauthenticated(DispatcherError, PermanentError):
    """No key, a malformed key, or one that was never issued (401 ``unauthenticated``)."""


class KeyRevoked(DispatcherError, PermanentError):
    """The key was revoked (401 ``key_revoked``)."""


class RateLimited(DispatcherError, TransientError):
    """The tenant is over its request rate (429 ``rate_limited`` with ``Retry-After``)."""

    def __init__(self, tenant: str, retry_after_s: float, decision: Decision | None = None) -> None:
        super().__init__(f"tenant {tenant} is over its request rate; retry after the pause")
        self.retry_after_s = retry_after_s
        self.decision = decision


class InFlightLimit(DispatcherError, TransientError):
    """The tenant has as many jobs queued or running as its limit allows."""

    def __init__(self, tenant: str, limit: int) -> None:
        super().__init__(
            f"tenant {tenant!r} has {limit} jobs queued or running, its limit; "
            "retry once one has finished"
        )
        self.retry_after_s = 5.0


class InvalidCursor(DispatcherError, PermanentError, ValueError):
    """A listing cursor this gateway did not hand out."""


class MalformedCursor(InvalidCursor):
    """A cursor no listing could have handed out: its created time is not a finite number."""


@dataclass(frozen=True)
class Page:
    jobs: list[JobRecord]
    next_cursor: str | None  # None: no more jobs


class Tenancy:
    """Keys, limits and listings of the fleet's tenants, as seen from ``region``."""

    def __init__(self, client: Client, region: str) -> None:
        self.client = client
        self.region = region
        home = client.store(region).redis
        self.tenants = Tenants(home)
        self.limiter = RateLimiter(home)

    def authorize(self, key: str | None) -> ApiKey:
        """:meth:`authorize_metered` without the rate decision."""
        return self.authorize_metered(key)[0]

    def authorize_metered(self, key: str | None) -> tuple[ApiKey, Decision | None]:
        """The key's record, once its tenant's request rate allows one more request, and that
        rate's decision (None for a tenant without a rate limit). Raises
        :class:`Unauthenticated`, :class:`KeyRevoked` or :class:`RateLimited`; no message
        carries the key."""
        if not key:
            raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
        try:
            record = self.tenants.authenticate(key)
        except RevokedKey:
            raise KeyRevoked("this API key was revoked") from None
        except UnknownKey:
            raise Unauthenticated("the API key is not valid") from None
        limits = self.tenants.limits(record.tenant)
        size = limits.bucket_size
        if limits.rate_per_s is not None and size is not None:
            decision = self.limiter.take(record.tenant, limits.rate_per_s, size)
            if not decision.allowed:
                raise RateLimited(record.tenant, decision.retry_after_s, decision)
            return record, decision
        return record, None

    def owned(self, job_id: str, tenant: str) -> JobRecord:
        """``job_id``'s record if ``tenant`` owns it; otherwise :class:`JobNotFound`, the same
        as for an id that never existed, found at the same cost."""
        return self.client.get(job_id, tenant=tenant)

    def admission(self, tenant: str, jobs: int = 1) -> dict[str, int]:
        """What the tenant's limits allow ``jobs`` new jobs: raises :class:`InFlightLimit` when
        they would pass its in-flight limit; returns the submit options that carry its
        backlog cap."""
        limits = self.tenants.limits(tenant)
        if limits.in_flight is not None:
            counted = self.tenants.in_flight(tenant)
            if len(counted) + jobs > limits.in_flight:
                self.tenants.settle(tenant, [job for job in counted if self._finished(job)])
                if len(self.tenants.in_flight(tenant)) + jobs > limits.in_flight:
                    raise InFlightLimit(tenant, limits.in_flight)
        return {} if limits.backlog_cap is None else {"backlog_cap": limits.backlog_cap}

    def _finished(self, job_id: str) -> bool:
        try:
            return self.client.get(job_id).status.terminal
        except JobNotFound:
            return True

    def list_jobs(
        self,
        tenant: str,
        *,
        status: JobState | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> Page:
        """``tenant``'s jobs, newest first, across every region. A page may hold fewer than
        ``limit`` jobs when a status filter skipped many; follow ``next_cursor`` until None."""
        limit = max(1, min(limit, MAX_PAGE))
        try:
            after = Position.parse(cursor) if cursor else None
        except NonFiniteCursor as error:
            raise MalformedCursor(
                f"{cursor!r} holds the created time {error.created!r}, not a finite number"
            ) from None
        except BadCursor:
            raise InvalidCursor(f"cursor {cursor!r} was not handed out by this API") from None
        jobs: list[JobRecord] = []
        scanned = 0
        while len(jobs) < limit and scanned < PAGE_SCAN:
            batch = self._merged(tenant, limit, after, created_after, created_before)
            if not batch:
                return Page(jobs, None)
            for position in batch:
                after = position
                scanned += 1
                record = self._record(position.job_id, tenant)
                if record is not None and (status is None or record.status is status):
                    jobs.append(record)
                    if len(jobs) == limit:
                        break
        more = self._merged(tenant, 1, after, created_after, created_before)
        return Page(jobs, after.cursor() if after is not None and more else None)

    def _merged(
        self,
        tenant: str,
        limit: int,
        after: Position | None,
        created_after: float | None,
        created_before: float | None,
    ) -> list[Position]:
        """The next ``limit`` positions over every region's index, newest first."""
        found: list[Position] = []
        for region in self.client.topology.names:
            listing = Listing(self.client.store(region).redis)
            found += listing.page(tenant, limit, after, created_after, created_before)
        return sorted(set(found), reverse=True)[:limit]

    def _record(self, job_id: str, tenant: str) -> JobRecord | None:
        try:
            return self.owned(job_id, tenant)
        except JobNotFound:  # archived away or gone: skipped, not an error
            return None


def create_key_everywhere(client: Client, tenant: str, name: str = "") -> IssuedKey:
    """A new key for ``tenant``, valid in every region of the topology."""
    first, *others = client.topology.names
    issued = Tenants(client.store(first).redis).create_key(tenant, name)
    for region in others:
        Tenants(client.store(region).redis).import_key(issued.record, issued.hash)
    return issued


def revoke_everywhere(client: Client, key_id: str, tenant: str, at: float | None = None) -> ApiKey:
    """Revoke ``key_id`` (of ``tenant``) in every region, at ``at`` (default now: a later time
    is a rotation's grace period); raises :class:`UnknownKey`."""
    now = time.time() if at is None else at
    revoked = [
        Tenants(client.store(region).redis).revoke(key_id, tenant=tenant, at=now)
        for region in client.topology.names
    ]
    return revoked[0]
