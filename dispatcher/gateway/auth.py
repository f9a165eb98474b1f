"""``Authorization: Bearer <key>``: which tenant is calling, checked on every API request.

A FastAPI dependency over :class:`dispatcher.tenancy.Tenancy`; it runs in a worker thread (the
lookup and the rate check are Redis calls). The key itself is never logged or echoed: at most
its id prefix, and only the tenant is bound to the request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from animfleet.jobs import DEFAULT_TENANT
from animfleet.region.ratelimit import Decision
from dispatcher.gateway.errors import ApiError
from dispatcher.tenancy import KeyRevoked, RateLimited, Tenancy, Unauthenticated

# auto_error=False: a missing header is answered in this API's error shape, not FastAPI's.
bearer = HTTPBearer(
    scheme_name="ApiKey",
    bearerFormat="af_<id>_<secret>",
    description="An API key from `animfleet keys create --tenant T`.",
    auto_error=False,
)


@dataclass(frozen=True)
class Caller:
    tenant: str
    key_id: str | None  # None when the gateway runs without keys


def tenancy(request: Request) -> Tenancy:
    found: Tenancy = request.app.state.tenancy
    return found


def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """The calling tenant; 401 without a valid key, 401 ``key_revoked``, 429 over its rate."""
    if not request.app.state.runtime.settings.auth:
        return Caller(DEFAULT_TENANT, None)
    key = credentials.credentials if credentials is not None else None
    # RFC 6750: a request without a key learns the scheme, one with a bad key also the error.
    challenge = 'Bearer realm="animfleet"' + (', error="invalid_token"' if key else "")
    try:
        record, decision = tenancy(request).authorize_metered(key)
    except KeyRevoked as error:
        raise ApiError(401, "key_revoked", str(error), headers=_challenge(challenge)) from None
    except Unauthenticated as error:
        raise ApiError(401, "unauthenticated", str(error), headers=_challenge(challenge)) from None
    except RateLimited as error:
        request.state.rate_limit = error.decision
        raise ApiError(429, "rate_limited", str(error), retry_after_s=error.retry_after_s) from None
    request.state.rate_limit = decision
    request.state.tenant = record.tenant
    return Caller(record.tenant, record.id)


def _challenge(value: str) -> dict[str, str]:
    return {"WWW-Authenticate": value}


def rate_limit_headers(decision: Decision) -> dict[str, str]:
    """The tenant's request rate as RateLimit-Limit / -Remaining / -Reset (the IETF
    draft's fields: the bucket's size, whole requests left, seconds until it is full)."""
    return {
        "RateLimit-Limit": str(decision.limit),
        "RateLimit-Remaining": str(decision.remaining),
        "RateLimit-Reset": str(max(0, math.ceil(decision.full_in_s))),
    }


CallerDep = Annotated[Caller, Depends(authenticate)]
