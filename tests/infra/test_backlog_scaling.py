"""Scaling from the backlog: the target tracking policy, the wake from zero and the idle
scale-in read the metrics the router publishes (offline, from the parsed Terraform)."""

from __future__ import annotations

from typing import Any

import terraform_checks as checks


def resource(type_: str, name: str) -> dict[str, Any]:
    for block in checks.blocks(checks.TERRAFORM / checks.MODULE, "resource"):
        if block.type == type_ and block.name == name:
            return block.body
    raise AssertionError(f"no {type_}.{name}")


def queries(alarm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {query["id"]: query for query in alarm["metric_query"]}


def metric_of(query: dict[str, Any]) -> str:
    return str(checks.first(query, "metric")["metric_name"])


def test_target_tracking_follows_the_scaling_signal_and_never_scales_in() -> None:
    tracking = checks.first(
        resource("aws_autoscaling_policy", "worker_backlog"), "target_tracking_configuration"
    )
    spec = checks.first(tracking, "customized_metric_specification")
    assert spec["metric_name"] == "ScalingSignal"
    assert tracking["target_value"] == "${local.scaling_signal_target}"
    assert checks.is_true(tracking["disable_scale_in"])
    local_values = {
        name: value
        for block in checks.blocks(checks.TERRAFORM / checks.MODULE, "locals")
        for name, value in block.body.items()
    }
    assert local_values["scaling_signal_target"] == "${1 + local.backlog_per_worker_target}"


def test_a_backlog_in_an_empty_group_wakes_it() -> None:
    alarm = resource("aws_cloudwatch_metric_alarm", "worker_wake")
    found = queries(alarm)
    assert metric_of(found["backlog"]) == "Backlog" and metric_of(found["queued"]) == "QueueDepth"
    assert found["wake"]["expression"] == "IF(backlog + queued > 0 AND desired < 1, 1, 0)"
    assert alarm["alarm_actions"] == ["${aws_autoscaling_policy.worker_wake[each.key].arn}"]


def test_scale_in_removes_only_idle_workers_one_at_a_time() -> None:
    policy = resource("aws_autoscaling_policy", "worker_idle")
    assert policy["policy_type"] == "StepScaling"
    assert checks.first(policy, "step_adjustment")["scaling_adjustment"] == -1
    alarm = resource("aws_cloudwatch_metric_alarm", "worker_idle")
    found = queries(alarm)
    assert {metric_of(found[q]) for q in ("live", "inflight", "backlog")} == {
        "LiveWorkers",
        "InFlight",
        "Backlog",
    }
    # Idle = live beyond in flight, and only while nothing waits; at least one, for the whole
    # window: never below what is running.
    assert found["idle"]["expression"] == "IF(backlog < 1, live - inflight, 0)"
    # One group per cell, each removing an instance on the region-wide figure: as many idle
    # workers as groups (1 for a whole region).
    assert alarm["threshold"] == "${length(local.scaled_worker_groups)}"
    assert alarm["comparison_operator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["evaluation_periods"] == alarm["datapoints_to_alarm"]
    assert alarm["alarm_actions"] == ["${aws_autoscaling_policy.worker_idle[each.key].arn}"]
