"""The metrics the Terraform scales and alarms on are the ones the router publishes."""

from __future__ import annotations

from typing import Any

import terraform_checks as checks

from dispatcher.routing.cloudwatch import (
    DEFAULT_NAMESPACE,
    BacklogMetricsPublisher,
    RegionBacklog,
    RegionOutcomes,
)


class RecordingClient:
    def __init__(self) -> None:
        self.data: list[dict[str, Any]] = []

    def put_metric_data(self, Namespace: str, MetricData: list[dict[str, Any]]) -> None:
        self.data += MetricData


def published_metric_names() -> set[str]:
    client = RecordingClient()
    publisher = BacklogMetricsPublisher(client=client)
    publisher.publish({"us-east": RegionBacklog("us-east", 1, 1, 1, 1.0)})
    publisher.publish_outcomes({"us-east": RegionOutcomes("us-east", 1, 0)})
    assert all(d["Dimensions"] == [{"Name": "Region", "Value": "us-east"}] for d in client.data)
    return {datum["MetricName"] for datum in client.data}


def terraform_fleet_metrics() -> set[tuple[str, str]]:
    """(metric name, dimensions) of every metric read from the fleet namespace."""
    found = set()
    for resource in checks.blocks(checks.TERRAFORM / checks.MODULE, "resource"):
        specs = []
        if resource.type == "aws_autoscaling_policy":
            tracking = checks.first(resource.body, "target_tracking_configuration")
            specs.append(checks.first(tracking, "customized_metric_specification"))
        if resource.type == "aws_cloudwatch_metric_alarm":
            specs.append(resource.body)
            specs += [checks.first(q, "metric") for q in resource.body.get("metric_query", [])]
        for spec in specs:
            if spec.get("namespace") == "${var.metrics_namespace}":
                dimensions = spec.get("dimensions") or checks.first(spec, "metric_dimension")
                found.add((spec["metric_name"], str(dimensions)))
    return found


def test_scaling_and_alarms_read_only_published_metrics_by_region() -> None:
    local_values = {
        name: str(value)
        for block in checks.blocks(checks.TERRAFORM / checks.MODULE, "locals")
        for name, value in block.body.items()
    }
    metrics = {
        (name, local_values.get(dimensions.removeprefix("${local.").rstrip("}"), dimensions))
        for name, dimensions in terraform_fleet_metrics()
    }
    names = {name for name, _ in metrics}

    scaling = {"ScalingSignal", "Backlog", "InFlight", "QueueDepth"}
    assert scaling | {"OldestJobAgeSeconds", "LiveWorkers", "JobsFailed"} <= names
    assert names <= published_metric_names()
    for name, dimensions in metrics:
        assert "Region" in dimensions and "fleet_region" in dimensions, (name, dimensions)


def test_the_namespaces_agree() -> None:
    variable = next(
        v
        for v in checks.blocks(checks.TERRAFORM / checks.MODULE, "variable")
        if v.name == "metrics_namespace"
    )
    assert variable.body["default"] == DEFAULT_NAMESPACE


def test_the_backlog_policy_target_is_wait_over_job_time() -> None:
    local_values = {
        name: value
        for block in checks.blocks(checks.TERRAFORM / checks.MODULE, "locals")
        for name, value in block.body.items()
    }
    assert local_values["backlog_per_worker_target"] == (
        "${var.acceptable_wait_seconds / var.job_duration_seconds}"
    )
