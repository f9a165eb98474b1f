"""``Authorization: Bearer <key>``: which tenant is calling, checked on every API request.

A FastAPI dependency over :class:`dispatcher.tenancy.Tenancy`; it runs in a worker thread (the
lookup and the rate check are Redis calls). The key itself is never logged or echoed: at most
its id prefix, and only the tenant is bound to the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from animfleet.jobs import DEFAULT_TENANT
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
    try:
        record = tenancy(request).authorize(key)
    except KeyRevoked as error:
        raise ApiError(401, "key_revoked", str(error)) from None
    except Unauthenticated as error:
        raise ApiError(401, "unauthenticated", str(error)) from None
    except RateLimited as error:
        raise ApiError(429, "rate_limited", str(error), retry_after_s=error.retry_after_s) from None
    request.state.tenant = record.tenant
    return Caller(record.tenant, record.id)


CallerDep = Annotated[Caller, Depends(authenticate)]
