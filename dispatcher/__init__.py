"""The dispatcher: validate, record and place jobs on the right region's queue."""

from dispatcher.client import Client, EnqueueFailed, JobHandle, WaitTimeout
from dispatcher.inputs import AnimationRequest, InvalidInput

__all__ = [
    "AnimationRequest",
    "Client",
    "EnqueueFailed",
    "InvalidInput",
    "JobHandle",
    "WaitTimeout",
]
