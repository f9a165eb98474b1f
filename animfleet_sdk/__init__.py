"""The HTTP SDK: ``from animfleet_sdk import Animfleet, AsyncAnimfleet``.

``pip install ./sdk-python`` (the ``animfleet-sdk`` distribution) installs it with httpx and
pydantic only: no PyTorch, no Redis, no broker. The request types are the API's own
(:mod:`animfleet_api.request`); the sync client is generated from the async one. The
in-cluster path, ``dispatcher.Client`` (the ``fleet`` extra), talks to the regions' Redis
directly instead.
"""

from typing import TYPE_CHECKING, Any

from animfleet_sdk._async_client import AsyncAnimfleet
from animfleet_sdk._sync_client import Animfleet
from animfleet_sdk.errors import ApiError, RequestRefused, TryLater, WaitTimeout
from animfleet_sdk.responses import (
    BatchResult,
    DayUsage,
    DeletedJob,
    Event,
    Job,
    JobLog,
    JobPage,
    LogEntry,
    StoredUpload,
    Usage,
)

if TYPE_CHECKING:
    from animfleet_api.request import AddonRequest, BatchItem, JobRequest, RegionRequest

# The request types are built when first named, not on import: a client that never validates a
# body locally does not pay for their schemas.
_REQUEST_TYPES = frozenset({"AddonRequest", "BatchItem", "JobRequest", "RegionRequest"})


def __getattr__(name: str) -> Any:
    if name in _REQUEST_TYPES:
        from animfleet_api import request

        return getattr(request, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AddonRequest",
    "Animfleet",
    "ApiError",
    "AsyncAnimfleet",
    "BatchItem",
    "BatchResult",
    "DayUsage",
    "DeletedJob",
    "Event",
    "Job",
    "JobLog",
    "JobPage",
    "JobRequest",
    "LogEntry",
    "RegionRequest",
    "RequestRefused",
    "StoredUpload",
    "TryLater",
    "Usage",
    "WaitTimeout",
]
