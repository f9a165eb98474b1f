"""Each tenant sees only its own jobs: what the job routes apply to the calling tenant.

With keys on, a job's tenant is the key's, never the body's; idempotency keys and client-chosen
job ids are scoped per tenant (the same key or id from two tenants names two jobs: each tenant
sees only its own id, stored as :func:`animfleet.jobs.scoped_job_id`); another tenant's job
answers exactly like a missing one, at the same cost. With keys off
(``ANIMFLEET_GATEWAY_AUTH=0``) the body's ``tenant`` still picks the fair share, as before
tenants had keys.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from fastapi import Request

from animfleet.jobs import JobRecord, scoped_job_id
from animfleet.region.erasure import Erasure
from animfleet.region.jobstore import JobNotFound
from animfleet_api.bounds import MAX_IDEMPOTENCY_KEY_CHARS as MAX_KEY_CHARS
from dispatcher.gateway.auth import Caller
from dispatcher.gateway.errors import ApiError
from dispatcher.lookup import CLIENT_JOB_ID
from dispatcher.tenancy import Tenancy


def tenancy_of(request: Request) -> Tenancy:
    found: Tenancy = request.app.state.tenancy
    return found


def submit_options(caller: Caller, options: dict[str, Any]) -> dict[str, Any]:
    """The body's options with the tenant the job counts against."""
    if caller.key_id is None:
        return options
    given = options.get("tenant")
    if given is not None and given != caller.tenant:
        raise ApiError(422, "invalid_input", "tenant: is the API key's tenant; omit it", "tenant")
    return {**options, "tenant": caller.tenant}


def scoped_key(caller: Caller, key: str | None) -> str | None:
    """The idempotency key as stored: per tenant when keys are on."""
    if key is None or caller.key_id is None:
        return key
    scoped = f"{caller.tenant}:{key}"
    if len(scoped) > MAX_KEY_CHARS:  # still unique per (tenant, key), within the limit
        scoped = f"{caller.tenant}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return scoped


def stored_id(caller: Caller, job_id: str) -> str:
    """The stored id a job id from the caller names: a client-chosen one (no dot) is scoped to
    the key's tenant; ``<region>.<token>`` ids are the fleet's own, the same for everyone."""
    if caller.key_id is None or not CLIENT_JOB_ID.match(job_id):
        return job_id
    return scoped_job_id(job_id, caller.tenant)


def owned(request: Request, caller: Caller, job_id: str) -> JobRecord:
    """``job_id``'s record if the caller's tenant owns it, else 404 like a missing job (410
    ``deleted`` for the caller's own deleted job)."""
    stored = stored_id(caller, job_id)
    try:
        if caller.key_id is None:
            record: JobRecord = request.app.state.runtime.client.get(job_id)
            return record
        return tenancy_of(request).owned(stored, caller.tenant)
    except JobNotFound:
        if_deleted(request, caller, stored, job_id)
        raise JobNotFound(job_id) from None  # the id as the caller knows it


def if_deleted(request: Request, caller: Caller, stored: str, job_id: str) -> None:
    """410 ``deleted`` when ``stored`` names a job of the caller's that was deleted."""
    tenancy = tenancy_of(request)
    tenant = caller.tenant if caller.key_id is not None else None
    at = Erasure(tenancy.client.store(tenancy.region).redis).deleted_at(stored, tenant)
    if at is not None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
        raise ApiError(410, "deleted", f"job {job_id} was deleted at {when}")


def admitted(caller: Caller, record: JobRecord) -> None:
    """After a submit: a client-chosen id taken by another tenant is a conflict (not a leak of
    that job). (The admission listed a new job under its tenant.)"""
    if caller.key_id is not None and record.tenant != caller.tenant:
        raise ApiError(409, "conflict", "this job id is taken; choose another", "id")
