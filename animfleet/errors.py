"""The base of every error animfleet raises on purpose, and whether retrying can help.

Each package derives its own base (``storage.StorageError``, ``dispatcher.DispatcherError``,
``workers.WorkerError``); a concrete error also derives :class:`TransientError` (the same call
may succeed later: back off and retry) or :class:`PermanentError` (it will fail the same way:
fix the input or the state first). Callers branch on these two, never on messages.
"""

from __future__ import annotations

from typing import ClassVar


class AnimfleetError(Exception):
    """Anything animfleet raises on purpose."""

    retryable: ClassVar[bool | None] = None  # None: the subclass does not say


class TransientError(AnimfleetError):
    """Retrying later can succeed: a server away, a region full, a timeout."""

    retryable = True


class PermanentError(AnimfleetError):
    """Retrying the same call cannot succeed: bad input, a missing job, a refused transition."""

    retryable = False


class NotFound(PermanentError):
    """A definite answer that nothing exists at a name (an object store's 404). Only this may be
    taken as "there is none": a failed read (a throttle, a timeout) raises something else and
    says nothing about what exists."""
