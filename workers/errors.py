"""The base of the workers' errors; each concrete one says whether retrying can help."""

from __future__ import annotations

from animfleet.errors import AnimfleetError


class WorkerError(AnimfleetError):
    """Raised by a GPU worker or the webhook sender on purpose."""
