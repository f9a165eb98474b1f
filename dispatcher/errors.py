"""The base of the dispatcher's errors; each concrete one says whether retrying can help."""

from __future__ import annotations

from animfleet.errors import AnimfleetError


class DispatcherError(AnimfleetError):
    """Raised by the dispatcher (client, admission, gateway) on purpose."""
