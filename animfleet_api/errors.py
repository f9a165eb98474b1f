"""An error answer of the API: ``{"error": {"code", "message", "field"?}}`` with its status and,
for 429 and 503, how long to wait. The gateway raises it; the SDK raises what it received."""

from __future__ import annotations


class ApiProblem(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.retry_after_s = field, retry_after_s
