"""What the SDK raises: the API's ``{"error": {code, message, field}}`` with its status."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.field, self.retry_after_s = field, retry_after_s


class RequestRefused(ApiError):
    """4xx but 429: fix the request, the key or the job id first."""


class TryLater(ApiError):
    """429 or 503 after the SDK's own retries ran out: worth retrying later."""


class WaitTimeout(TimeoutError):
    """The job was not terminal in the time given."""
