"""Publish each region's backlog to CloudWatch, where the GPU groups' scaling policies read it.

The names here are the contract with ``infra/terraform/modules/region_fleet``: the target tracking
policy follows ``ScalingSignal`` (``(Backlog + InFlight) / max(LiveWorkers, 1)``), the idle
scale-in follows ``InFlight`` and ``LiveWorkers``, the alarms watch ``OldestJobAgeSeconds``,
``LiveWorkers``, ``JobsFailed`` and ``JobsSucceeded``, and a waiting job in an empty group
(``Backlog`` or ``QueueDepth``) wakes it.
Every datum carries the dimension ``Region=<region name>``.

Example::

    publisher = BacklogMetricsPublisher(region_name="us-east-1")
    publisher.publish({"us-east": RegionBacklog("us-east", queue_depth=12, live_workers=4,
                                                busy_workers=4, oldest_queued_age_s=31.5)})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DEFAULT_NAMESPACE = "animfleet"
# PutMetricData accepts at most 1000 metric data per request.
MAX_DATA_PER_CALL = 1000


@dataclass(frozen=True)
class RegionBacklog:
    """One region's load as the router sees it at one moment."""

    region: str
    queue_depth: int
    live_workers: int
    busy_workers: int
    oldest_queued_age_s: float
    backlog: int = 0  # jobs in the region's backlog, not yet on its GPU queue

    def __post_init__(self) -> None:
        fields = ("queue_depth", "live_workers", "busy_workers", "oldest_queued_age_s", "backlog")
        for field in fields:
            if getattr(self, field) < 0:
                raise ValueError(f"`{field}` must be >= 0 but is {getattr(self, field)}")

    @property
    def backlog_per_worker(self) -> float:
        """Queued jobs per live worker; with no live worker, the whole queue (so it scales out)."""
        return self.queue_depth / max(self.live_workers, 1)

    @property
    def in_flight(self) -> int:
        """Jobs running or on the GPU queue."""
        return self.busy_workers + self.queue_depth

    @property
    def scaling_signal(self) -> float:
        """``(backlog + in_flight) / max(live_workers, 1)``: work per live GPU, and with no
        live GPU the whole of it, so a region at zero with waiting jobs wakes."""
        return (self.backlog + self.in_flight) / max(self.live_workers, 1)


@dataclass(frozen=True)
class RegionOutcomes:
    """Jobs that reached a terminal state in one region since the previous report."""

    region: str
    succeeded: int
    failed: int

    def __post_init__(self) -> None:
        if self.succeeded < 0 or self.failed < 0:
            raise ValueError(
                f"job counts must be >= 0 but are succeeded={self.succeeded}, failed={self.failed}"
            )


class BacklogMetricsPublisher:
    """Sends region metrics to CloudWatch with ``put_metric_data``.

    Args:
        namespace: the CloudWatch namespace; the Terraform module's ``metrics_namespace``.
        client: a boto3 CloudWatch client; one is created on first use when omitted.
        region_name: AWS region of the client created on first use (default: boto3's own choice).
    """

    def __init__(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        client: Any | None = None,
        region_name: str | None = None,
    ) -> None:
        if not namespace or namespace.startswith("AWS/"):
            raise ValueError(f"`namespace` must be a custom namespace but is {namespace!r}")
        self.namespace = namespace
        self._client = client
        self._region_name = region_name

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("cloudwatch", region_name=self._region_name)
        return self._client

    def publish(self, loads: Mapping[str, RegionBacklog]) -> None:
        """Publish QueueDepth, BacklogPerWorker, LiveWorkers, BusyWorkers, OldestJobAgeSeconds,
        Backlog, InFlight and ScalingSignal.

        Raises whatever the client raises (botocore's ``ClientError``, connection errors); the
        caller decides whether a missed report matters.
        """
        timestamp = datetime.now(UTC)
        data: list[dict[str, Any]] = []
        for name, load in loads.items():
            if load.region != name:
                raise ValueError(f"load for region {load.region!r} is filed under {name!r}")
            data += [
                _datum(name, "QueueDepth", load.queue_depth, "Count", timestamp),
                _datum(name, "BacklogPerWorker", load.backlog_per_worker, "None", timestamp),
                _datum(name, "LiveWorkers", load.live_workers, "Count", timestamp),
                _datum(name, "BusyWorkers", load.busy_workers, "Count", timestamp),
                _datum(name, "OldestJobAgeSeconds", load.oldest_queued_age_s, "Seconds", timestamp),
                _datum(name, "Backlog", load.backlog, "Count", timestamp),
                _datum(name, "InFlight", load.in_flight, "Count", timestamp),
                _datum(name, "ScalingSignal", load.scaling_signal, "None", timestamp),
            ]
        self._put(data)

    def publish_outcomes(self, outcomes: Mapping[str, RegionOutcomes]) -> None:
        """Publish JobsSucceeded and JobsFailed, the counts behind the failure rate alarm."""
        timestamp = datetime.now(UTC)
        data: list[dict[str, Any]] = []
        for name, counts in outcomes.items():
            if counts.region != name:
                raise ValueError(f"outcomes for region {counts.region!r} are filed under {name!r}")
            data += [
                _datum(name, "JobsSucceeded", counts.succeeded, "Count", timestamp),
                _datum(name, "JobsFailed", counts.failed, "Count", timestamp),
            ]
        self._put(data)

    def _put(self, data: Sequence[dict[str, Any]]) -> None:
        for batch in _batches(data, MAX_DATA_PER_CALL):
            self.client.put_metric_data(Namespace=self.namespace, MetricData=batch)


def _datum(region: str, name: str, value: float, unit: str, timestamp: datetime) -> dict[str, Any]:
    return {
        "MetricName": name,
        "Dimensions": [{"Name": "Region", "Value": region}],
        "Timestamp": timestamp,
        "Value": float(value),
        "Unit": unit,
    }


def _batches(items: Sequence[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
