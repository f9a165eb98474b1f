"""Every error the gateway returns: ``{"error": {"code", "message", "field"?}}`` + status code."""

from __future__ import annotations

import math
from typing import Any

import redis
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from starlette.exceptions import HTTPException

from animfleet.errors import TransientError
from animfleet.region.jobstore import IdempotencyConflict, JobNotFound
from animfleet_api.errors import ApiProblem
from animfleet_api.reasons import refusal
from dispatcher.admission import BacklogFull
from dispatcher.client import EnqueueFailed
from dispatcher.errors import DispatcherError
from dispatcher.inputs import InvalidInput
from dispatcher.tenancy import InFlightLimit

log = structlog.stdlib.get_logger("animfleet.gateway")

BROKER_RETRY_AFTER_S = 5


class ApiError(ApiProblem, DispatcherError):
    """An error with its HTTP status; raised by routes, rendered by :func:`install`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        retry_after_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, code, message, field, retry_after_s)
        self.headers = headers or {}


def error_response(error: ApiError) -> JSONResponse:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.field is not None:
        body["field"] = error.field
    headers = dict(error.headers)
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return JSONResponse({"error": body}, status_code=error.status, headers=headers)


def as_api_error(error: Exception) -> ApiError:
    """Map a domain exception to its HTTP form."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, InvalidInput):
        return ApiError(422, "invalid_input", f"{error.field}: {error.message}", error.field)
    if isinstance(error, IdempotencyConflict):  # keys are per tenant: the job is the caller's
        message = (
            f"Idempotency-Key was already used for job {error.job_id} with a different request"
            " body; use a new key for a new request"
        )
        return ApiError(409, "idempotency_conflict", message, "Idempotency-Key")
    if isinstance(error, FileExistsError):
        return ApiError(409, "conflict", str(error), "id")
    if isinstance(error, JobNotFound):
        return ApiError(404, "not_found", f"no job with id {error.args[0]!r}")
    if isinstance(error, EnqueueFailed):
        return ApiError(503, "enqueue_failed", str(error), retry_after_s=BROKER_RETRY_AFTER_S)
    if isinstance(error, BacklogFull):
        return ApiError(429, "backlog_full", str(error), retry_after_s=error.retry_after_s)
    if isinstance(error, InFlightLimit):
        return ApiError(429, "in_flight_limit", str(error), retry_after_s=error.retry_after_s)
    retry_after = getattr(error, "retry_after_s", None)
    if isinstance(retry_after, int | float):  # dispatcher.admission.AtCapacity
        return ApiError(429, "at_capacity", str(error), retry_after_s=retry_after)
    if isinstance(error, redis.ConnectionError | redis.TimeoutError | OperationalError):
        return ApiError(
            503,
            "broker_unavailable",
            "the region's broker is unreachable; retry shortly",
            retry_after_s=BROKER_RETRY_AFTER_S,
        )
    if isinstance(error, TransientError):  # e.g. the archive's storage throttled a read
        return ApiError(503, "unavailable", str(error), retry_after_s=BROKER_RETRY_AFTER_S)
    log.error("gateway.internal_error", error=f"{type(error).__name__}: {error}", exc_info=error)
    return ApiError(500, "internal_error", "internal error; it was logged")


def _validation_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":  # its location is a byte offset, not a field
        context = first.get("ctx")
        reason = context.get("error") if isinstance(context, dict) else None
        message = f"body: not valid JSON ({reason or 'decode error'})"
        return error_response(ApiError(400, "invalid_json", message, "body"))
    location = [str(part) for part in first.get("loc", ()) if part not in ("body",)]
    field = ".".join(
        location[1:] if location[:1] in (["header"], ["path"], ["query"]) else location
    )
    message = f"{field or 'body'}: {refusal(first)}"
    return error_response(ApiError(422, "invalid_input", message, field or "body"))


def _http_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "body_too_large"}
    code = codes.get(error.status_code, "http_error")
    field = "body" if error.status_code in (400, 413) else None  # a body that cannot be parsed
    response = error_response(ApiError(error.status_code, code, str(error.detail), field))
    for name, value in (error.headers or {}).items():
        response.headers[name] = value
    return response


def _any_error(_: Request, error: Exception) -> JSONResponse:
    return error_response(as_api_error(error))


# Expected failures: rendered by the exception middleware (an ``Exception`` handler would also
# be reached, but through the server-error path that logs a traceback for each one).
EXPECTED: tuple[type[Exception], ...] = (
    ApiError,
    InvalidInput,
    IdempotencyConflict,
    FileExistsError,
    JobNotFound,
    EnqueueFailed,
    BacklogFull,
    InFlightLimit,
    redis.RedisError,
    OperationalError,  # kombu: the broker connection for publishing
    TransientError,  # e.g. storage unavailable: 503, retry later
)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    for kind in EXPECTED:
        app.add_exception_handler(kind, _any_error)
    try:
        from dispatcher.admission import AtCapacity
    except ImportError:  # admission not part of this deployment
        pass
    else:
        app.add_exception_handler(AtCapacity, _any_error)
    app.add_exception_handler(Exception, _any_error)
