"""What the SDK raises: the API's ``{"error": {code, message, field}}`` with its status."""

from __future__ import annotations

from animfleet_api.errors import ApiProblem


class ApiError(ApiProblem):
    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class RequestRefused(ApiError):
    """4xx but 429: fix the request, the key or the job id first."""


class TryLater(ApiError):
    """429 or 503 after the SDK's own retries ran out: worth retrying later."""


class WaitTimeout(TimeoutError):
    """The job was not terminal in the time given."""
