"""The HTTP SDK: ``from animfleet.sdk import Animfleet, AsyncAnimfleet``.

Installs with the base package and imports only httpx and pydantic: no PyTorch, no Redis. The
in-cluster path, ``dispatcher.Client``, talks to the regions' Redis directly instead.
"""

from animfleet.sdk.aio import AsyncAnimfleet
from animfleet.sdk.client import Animfleet
from animfleet.sdk.errors import ApiError, RequestRefused, TryLater, WaitTimeout
from animfleet.sdk.models import BatchResult, Event, Job, JobPage

__all__ = [
    "Animfleet",
    "ApiError",
    "AsyncAnimfleet",
    "BatchResult",
    "Event",
    "Job",
    "JobPage",
    "RequestRefused",
    "TryLater",
    "WaitTimeout",
]
