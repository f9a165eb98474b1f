"""The HTTP SDK: ``from animfleet_sdk import Animfleet, AsyncAnimfleet``.

``pip install animfleet`` installs it with httpx and pydantic only: no PyTorch, no Redis, no
broker. The request types are the API's own (:mod:`animfleet_api.request`); the sync client is
generated from the async one. The in-cluster path, ``dispatcher.Client`` (the ``fleet`` extra),
talks to the regions' Redis directly instead.
"""

from animfleet_api.request import AddonRequest, BatchItem, JobRequest, RegionRequest
from animfleet_sdk._async_client import AsyncAnimfleet
from animfleet_sdk._sync_client import Animfleet
from animfleet_sdk.errors import ApiError, RequestRefused, TryLater, WaitTimeout
from animfleet_sdk.models import BatchResult, Event, Job, JobPage

__all__ = [
    "AddonRequest",
    "Animfleet",
    "ApiError",
    "AsyncAnimfleet",
    "BatchItem",
    "BatchResult",
    "Event",
    "Job",
    "JobPage",
    "JobRequest",
    "RegionRequest",
    "RequestRefused",
    "TryLater",
    "WaitTimeout",
]
