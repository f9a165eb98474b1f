"""Admission: where a new job runs and how it is taken in.

``settings`` (how the dispatcher admits, from the environment), ``regions`` (which region takes
a job now, and retries when none can), ``placement`` (the routing table's copy and the attempt
loop over regions) and ``enqueue`` (one region's atomic admission: record, input and message).
"""

from dispatcher.admission.enqueue import RegionQueue
from dispatcher.admission.placement import Placement, RoutingCache
from dispatcher.admission.regions import (
    AtCapacity,
    BacklogFull,
    RegionsFull,
    RetrySchedule,
    admit,
    choose_region,
    execution_delay_s,
    source_utilization,
)
from dispatcher.admission.settings import (
    AdmissionEnv,
    AdmissionSettings,
    admission_settings_from_env,
)

__all__ = [
    "AdmissionEnv",
    "AdmissionSettings",
    "AtCapacity",
    "BacklogFull",
    "Placement",
    "RegionQueue",
    "RegionsFull",
    "RetrySchedule",
    "RoutingCache",
    "admission_settings_from_env",
    "admit",
    "choose_region",
    "execution_delay_s",
    "source_utilization",
]
