"""The dispatcher: validate, record and place jobs on the right region's queue."""

from dispatcher.client import Client, EnqueueFailed, JobHandle
from dispatcher.errors import DispatcherError
from dispatcher.inputs import AnimationRequest, InvalidInput
from dispatcher.lookup import WaitTimeout

__all__ = [
    "AnimationRequest",
    "Client",
    "DispatcherError",
    "EnqueueFailed",
    "InvalidInput",
    "JobHandle",
    "WaitTimeout",
]
