from __future__ import annotations

from datetime import datetime
from typing import Any
from unittest import mock

import pytest

from dispatcher.routing.cloudwatch import (
    MAX_DATA_PER_CALL,
    BacklogMetricsPublisher,
    RegionBacklog,
    RegionOutcomes,
)


class RecordingClient:
    """Stands in for boto3's CloudWatch client; keeps every put_metric_data call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def put_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {}

    def values(self, region: str) -> dict[str, float]:
        return {
            datum["MetricName"]: datum["Value"]
            for call in self.calls
            for datum in call["MetricData"]
            if datum["Dimensions"] == [{"Name": "Region", "Value": region}]
        }


def backlog(region: str = "us-east", **overrides: Any) -> RegionBacklog:
    fields: dict[str, Any] = {
        "queue_depth": 12,
        "live_workers": 4,
        "busy_workers": 3,
        "oldest_queued_age_s": 31.5,
    }
    fields.update(overrides)
    return RegionBacklog(region=region, **fields)


def test_publish_sends_the_backlog_and_scaling_metrics_per_region() -> None:
    client = RecordingClient()
    loads = {"us-east": backlog("us-east"), "eu-west": backlog("eu-west", queue_depth=0)}

    BacklogMetricsPublisher(client=client).publish(loads)

    assert len(client.calls) == 1
    assert client.calls[0]["Namespace"] == "animfleet"
    assert client.values("us-east") == {
        "QueueDepth": 12.0,
        "BacklogPerWorker": 3.0,
        "LiveWorkers": 4.0,
        "BusyWorkers": 3.0,
        "OldestJobAgeSeconds": 31.5,
        "Backlog": 0.0,
        "InFlight": 15.0,
        "ScalingSignal": 3.75,
    }
    assert client.values("eu-west")["QueueDepth"] == 0.0
    assert client.values("eu-west")["BacklogPerWorker"] == 0.0


def test_backlog_per_worker_with_no_live_worker_is_the_whole_queue() -> None:
    client = RecordingClient()

    BacklogMetricsPublisher(client=client).publish({"us-east": backlog(live_workers=0)})

    assert client.values("us-east")["BacklogPerWorker"] == 12.0


def test_scaling_signal_counts_the_backlog_and_wakes_a_region_at_zero() -> None:
    client = RecordingClient()
    loads = {"us-east": backlog(live_workers=0, busy_workers=0, queue_depth=0, backlog=7)}

    BacklogMetricsPublisher(client=client).publish(loads)

    values = client.values("us-east")
    assert (values["Backlog"], values["InFlight"], values["ScalingSignal"]) == (7.0, 0.0, 7.0)


def test_data_carry_units_and_one_timestamp() -> None:
    client = RecordingClient()

    BacklogMetricsPublisher(client=client).publish({"us-east": backlog()})

    data = client.calls[0]["MetricData"]
    units = {datum["MetricName"]: datum["Unit"] for datum in data}
    assert units["OldestJobAgeSeconds"] == "Seconds"
    assert units["QueueDepth"] == "Count"
    assert len({datum["Timestamp"] for datum in data}) == 1
    assert isinstance(data[0]["Timestamp"], datetime)
    assert data[0]["Timestamp"].tzinfo is not None


def test_publish_splits_into_calls_of_at_most_1000_data() -> None:
    client = RecordingClient()
    # 126 regions x 8 metrics = 1008 data: one full call and one of 8.
    loads = {f"r{i:03d}": backlog(f"r{i:03d}") for i in range(126)}

    BacklogMetricsPublisher(namespace="fleet-test", client=client).publish(loads)

    sizes = [len(call["MetricData"]) for call in client.calls]
    assert sizes == [MAX_DATA_PER_CALL, 8]
    assert {call["Namespace"] for call in client.calls} == {"fleet-test"}
    assert len(client.values("r125")) == 8


def test_publish_nothing_makes_no_call() -> None:
    client = RecordingClient()

    BacklogMetricsPublisher(client=client).publish({})

    assert client.calls == []


def test_publish_outcomes_sends_success_and_failure_counts() -> None:
    client = RecordingClient()

    BacklogMetricsPublisher(client=client).publish_outcomes(
        {"us-east": RegionOutcomes("us-east", succeeded=9, failed=1)}
    )

    assert client.values("us-east") == {"JobsSucceeded": 9.0, "JobsFailed": 1.0}


def test_a_load_filed_under_another_region_is_refused() -> None:
    client = RecordingClient()

    with pytest.raises(ValueError, match="filed under 'eu-west'"):
        BacklogMetricsPublisher(client=client).publish({"eu-west": backlog("us-east")})
    assert client.calls == []


@pytest.mark.parametrize(
    "field", ["queue_depth", "live_workers", "busy_workers", "oldest_queued_age_s"]
)
def test_negative_counts_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match=f"`{field}` must be >= 0"):
        backlog(**{field: -1})


def test_an_aws_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="custom namespace"):
        BacklogMetricsPublisher(namespace="AWS/EC2", client=RecordingClient())


def test_the_client_is_created_lazily_in_the_given_region() -> None:
    client = RecordingClient()
    with mock.patch("boto3.client", return_value=client) as factory:
        publisher = BacklogMetricsPublisher(region_name="eu-west-1")
        factory.assert_not_called()

        publisher.publish({"us-east": backlog()})

    factory.assert_called_once_with("cloudwatch", region_name="eu-west-1")
    assert len(client.calls) == 1


def test_client_errors_reach_the_caller() -> None:
    client = mock.Mock()
    client.put_metric_data.side_effect = RuntimeError("throttled")

    with pytest.raises(RuntimeError, match="throttled"):
        BacklogMetricsPublisher(client=client).publish({"us-east": backlog()})
