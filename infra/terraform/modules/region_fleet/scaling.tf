################################################################################
# Scaling on the backlog, and the alarms an operator is woken by
#
# The router publishes, per region (dimension Region = fleet_region), in `metrics_namespace`:
# QueueDepth, BacklogPerWorker (= QueueDepth / max(LiveWorkers, 1)), LiveWorkers, BusyWorkers,
# OldestJobAgeSeconds, Backlog (jobs waiting for a GPU in the region's backlog), InFlight
# (running + on the GPU queue), ScalingSignal (= (Backlog + InFlight) / max(LiveWorkers, 1)),
# JobsSucceeded and JobsFailed (see dispatcher/routing/cloudwatch.py).
################################################################################

locals {
  region_dimension = { Region = var.fleet_region }
  # One job runs per worker; on top of it, acceptable_wait_seconds / job_duration_seconds jobs
  # per worker is the most backlog that still starts within the acceptable wait.
  scaling_signal_target = 1 + local.backlog_per_worker_target

  # The backlog policies act on each shared GPU group (one per cell) and keep the names they had
  # before cells for the `worker` group. The metrics are region-wide: every cell's group follows
  # the region's work per worker.
  scaled_worker_groups = {
    for group in keys(local.shared_worker_groups) : group => group == "worker" ? local.name : "${local.name}-${group}"
  }
}

moved {
  from = aws_autoscaling_policy.worker_backlog
  to   = aws_autoscaling_policy.worker_backlog["worker"]
}

moved {
  from = aws_autoscaling_policy.worker_wake
  to   = aws_autoscaling_policy.worker_wake["worker"]
}

moved {
  from = aws_cloudwatch_metric_alarm.worker_wake
  to   = aws_cloudwatch_metric_alarm.worker_wake["worker"]
}

moved {
  from = aws_autoscaling_policy.worker_idle
  to   = aws_autoscaling_policy.worker_idle["worker"]
}

moved {
  from = aws_cloudwatch_metric_alarm.worker_idle
  to   = aws_cloudwatch_metric_alarm.worker_idle["worker"]
}

moved {
  from = aws_cloudwatch_metric_alarm.no_live_workers
  to   = aws_cloudwatch_metric_alarm.no_live_workers["worker"]
}

# Each worker clears one job per job_duration_seconds. Target tracking adds instances to hold the
# work per worker (backlog + in flight) at its target (work per worker and per instance differ by
# the constant GPUs per instance, which the ratio absorbs). It never scales in: that is the idle
# policy below, which removes only instances beyond what is running.
resource "aws_autoscaling_policy" "worker_backlog" {
  for_each = local.scaled_worker_groups

  region = var.aws_region

  name                   = "${each.value}-backlog-per-worker"
  autoscaling_group_name = aws_autoscaling_group.worker[each.key].name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    target_value     = local.scaling_signal_target
    disable_scale_in = true

    customized_metric_specification {
      namespace   = var.metrics_namespace
      metric_name = "ScalingSignal"
      statistic   = "Average"

      metric_dimension {
        name  = "Region"
        value = var.fleet_region
      }
    }
  }
}

# Target tracking multiplies the current capacity, so it cannot leave zero: a job waiting in the
# backlog (or queued) in an empty group starts one instance, after which the backlog policy takes
# over.
resource "aws_autoscaling_policy" "worker_wake" {
  for_each = local.scaled_worker_groups

  region = var.aws_region

  name                    = "${each.value}-wake-from-zero"
  autoscaling_group_name  = aws_autoscaling_group.worker[each.key].name
  policy_type             = "StepScaling"
  adjustment_type         = "ChangeInCapacity"
  metric_aggregation_type = "Maximum"

  step_adjustment {
    scaling_adjustment          = 1
    metric_interval_lower_bound = 0
  }
}

resource "aws_cloudwatch_metric_alarm" "worker_wake" {
  for_each = local.scaled_worker_groups

  region = var.aws_region

  alarm_name          = "${each.value}-jobs-queued-with-no-instances"
  alarm_description   = "Jobs wait in ${var.fleet_region}'s backlog or queue and its GPU group is at zero: start an instance."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.worker_wake[each.key].arn]

  metric_query {
    id          = "wake"
    expression  = "IF(backlog + queued > 0 AND desired < 1, 1, 0)"
    label       = "Waiting jobs with no GPU instance"
    return_data = true
  }

  metric_query {
    id = "backlog"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "Backlog"
      dimensions  = local.region_dimension
      stat        = "Maximum"
      period      = 60
    }
  }

  metric_query {
    id = "queued"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "QueueDepth"
      dimensions  = local.region_dimension
      stat        = "Maximum"
      period      = 60
    }
  }

  metric_query {
    id = "desired"

    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupDesiredCapacity"
      dimensions  = { AutoScalingGroupName = aws_autoscaling_group.worker[each.key].name }
      stat        = "Maximum"
      period      = 60
    }
  }

  tags = local.tags
}

# Scale in one instance at a time, and only while workers sit idle with nothing waiting: the
# group never shrinks below the workers that run or are about to run a job.
resource "aws_autoscaling_policy" "worker_idle" {
  for_each = local.scaled_worker_groups

  region = var.aws_region

  name                    = "${each.value}-idle-scale-in"
  autoscaling_group_name  = aws_autoscaling_group.worker[each.key].name
  policy_type             = "StepScaling"
  adjustment_type         = "ChangeInCapacity"
  metric_aggregation_type = "Minimum"

  step_adjustment {
    scaling_adjustment          = -1
    metric_interval_lower_bound = 0
  }
}

resource "aws_cloudwatch_metric_alarm" "worker_idle" {
  for_each = local.scaled_worker_groups

  region = var.aws_region

  alarm_name          = "${each.value}-idle-workers"
  alarm_description   = "Workers in ${var.fleet_region} sat idle with an empty backlog for ${var.scale_in_idle_minutes} minutes: remove one instance."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  # Every cell's group removes one instance on the region-wide figure: wait for as many idle
  # workers as there are groups.
  threshold           = length(local.scaled_worker_groups)
  evaluation_periods  = var.scale_in_idle_minutes
  datapoints_to_alarm = var.scale_in_idle_minutes
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.worker_idle[each.key].arn]

  metric_query {
    id          = "idle"
    expression  = "IF(backlog < 1, live - inflight, 0)"
    label       = "Idle workers with an empty backlog"
    return_data = true
  }

  metric_query {
    id = "live"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "LiveWorkers"
      dimensions  = local.region_dimension
      stat        = "Minimum"
      period      = 60
    }
  }

  metric_query {
    id = "inflight"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "InFlight"
      dimensions  = local.region_dimension
      stat        = "Maximum"
      period      = 60
    }
  }

  metric_query {
    id = "backlog"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "Backlog"
      dimensions  = local.region_dimension
      stat        = "Maximum"
      period      = 60
    }
  }

  tags = local.tags
}

resource "aws_autoscaling_policy" "cpu" {
  for_each = { for group, spec in local.cpu_groups : group => spec if spec.max_size > spec.min_size }

  region = var.aws_region

  name                   = "${local.name}-${each.key}-cpu"
  autoscaling_group_name = aws_autoscaling_group.cpu[each.key].name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    target_value = 60

    predefined_metric_specification {
      predefined_metric_type = "ASGAverageCPUUtilization"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "queue_age" {
  region = var.aws_region

  alarm_name          = "${local.name}-queue-age"
  alarm_description   = "The oldest queued job in ${var.fleet_region} has waited over ${var.queue_age_alarm_seconds} s for 3 minutes: the group is at its maximum, instances fail to start, or workers do not consume."
  namespace           = var.metrics_namespace
  metric_name         = "OldestJobAgeSeconds"
  dimensions          = local.region_dimension
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.queue_age_alarm_seconds
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions

  tags = local.tags
}

resource "aws_cloudwatch_metric_alarm" "failure_rate" {
  region = var.aws_region

  alarm_name          = "${local.name}-failure-rate"
  alarm_description   = "Over ${var.failure_rate_alarm_percent}% of the jobs that finished in ${var.fleet_region} in the last 10 minutes failed."
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.failure_rate_alarm_percent
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions

  metric_query {
    id          = "rate"
    expression  = "IF(failed + succeeded >= ${var.failure_rate_min_jobs}, 100 * failed / (failed + succeeded), 0)"
    label       = "Failed jobs (%)"
    return_data = true
  }

  metric_query {
    id = "failed"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "JobsFailed"
      dimensions  = local.region_dimension
      stat        = "Sum"
      period      = 600
    }
  }

  metric_query {
    id = "succeeded"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "JobsSucceeded"
      dimensions  = local.region_dimension
      stat        = "Sum"
      period      = 600
    }
  }

  tags = local.tags
}

resource "aws_cloudwatch_metric_alarm" "no_live_workers" {
  for_each = local.scaled_worker_groups

  region = var.aws_region

  alarm_name          = "${each.value}-no-live-workers"
  alarm_description   = "The ${var.fleet_region} GPU group wants instances but no worker has reported live for ${var.no_live_workers_alarm_minutes} minutes (or the router stopped publishing): jobs there cannot run."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = var.no_live_workers_alarm_minutes
  datapoints_to_alarm = var.no_live_workers_alarm_minutes
  # No data means the router is not publishing: nobody can tell whether workers live.
  treat_missing_data = "breaching"
  alarm_actions      = var.alarm_actions
  ok_actions         = var.alarm_actions

  metric_query {
    id          = "dead"
    expression  = "IF(desired >= 1 AND live < 1, 1, 0)"
    label       = "GPU instances wanted, no live worker"
    return_data = true
  }

  metric_query {
    id = "live"

    metric {
      namespace   = var.metrics_namespace
      metric_name = "LiveWorkers"
      dimensions  = local.region_dimension
      stat        = "Maximum"
      period      = 60
    }
  }

  metric_query {
    id = "desired"

    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupDesiredCapacity"
      dimensions  = { AutoScalingGroupName = aws_autoscaling_group.worker[each.key].name }
      stat        = "Maximum"
      period      = 60
    }
  }

  tags = local.tags
}
