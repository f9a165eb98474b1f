################################################################################
# Instances: a GPU worker group and CPU groups for the gateway, webhook sender and router
################################################################################

# The AMIs come from their SSM parameters; reading each AMI gives its root device name, which
# differs between Ubuntu (Deep Learning AMI) and Amazon Linux.
data "aws_ssm_parameter" "ami" {
  for_each = local.ami_parameters

  region = var.aws_region

  name = each.value
}

data "aws_ami" "this" {
  for_each = local.ami_parameters

  region = var.aws_region

  owners = ["amazon"]

  filter {
    name   = "image-id"
    values = [data.aws_ssm_parameter.ami[each.key].insecure_value]
  }
}

locals {
  worker_group_name = "${local.name}-worker"
  drain_hook_name   = "drain-running-jobs"

  # Everything here ends up in user data, which anyone allowed to describe the instance can read:
  # no token, password or broker URL with credentials. The instance fetches those at boot.
  user_data_common = {
    fleet_region      = var.fleet_region
    aws_region        = var.aws_region
    package_spec      = var.package_spec
    pip_index_url     = coalesce(var.pip_index_url, "")
    python_version    = var.python_version
    uv_version        = var.uv_version
    fleet_parameter   = local.fleet_parameter_name
    brokers_parameter = local.brokers_parameter_name
    environment       = var.environment
    gateway_port      = var.gateway_port
    stop_timeout      = var.job_timeout_seconds + 60
    model_bucket      = var.model_artifacts.bucket
    model_prefix      = var.model_artifacts.prefix
    worker_group_name = local.worker_group_name
    drain_hook_name   = local.drain_hook_name
  }

  ami_parameters = {
    gpu = var.gpu_ami_ssm_parameter
    cpu = var.cpu_ami_ssm_parameter
  }

  cpu_groups = merge(
    {
      services = {
        processes = ["web", "webhooks", "scheduler"]
        min_size  = var.services_min_size
        max_size  = var.services_max_size
      }
    },
    var.create_router ? {
      router = {
        processes = ["router"]
        min_size  = 1
        max_size  = 1
      }
    } : {},
  )

  # One launch template per process group.
  launch_groups = merge(
    {
      worker = {
        description      = "GPU worker: one Celery worker per GPU"
        ami              = "gpu"
        instance_type    = var.gpu_instance_type
        root_volume_size = var.gpu_root_volume_size
        processes        = ["worker"]
        broker_scope     = "home"
      }
    },
    {
      for group, spec in local.cpu_groups : group => {
        description      = join(" + ", spec.processes)
        ami              = "cpu"
        instance_type    = var.cpu_instance_type
        root_volume_size = 30
        processes        = spec.processes
        broker_scope     = "all"
      }
    },
  )

  security_groups = merge(
    {
      worker   = aws_security_group.worker.id
      services = aws_security_group.services.id
    },
    var.create_router ? { router = aws_security_group.router[0].id } : {},
  )
}

resource "aws_launch_template" "this" {
  for_each = local.launch_groups

  region = var.aws_region

  name                   = "${local.name}-${each.key}"
  description            = "animfleet ${local.name} ${each.value.description}"
  image_id               = data.aws_ssm_parameter.ami[each.value.ami].insecure_value
  instance_type          = each.value.instance_type
  update_default_version = true
  ebs_optimized          = true

  vpc_security_group_ids = [local.security_groups[each.key]]

  iam_instance_profile {
    arn = aws_iam_instance_profile.this[each.key].arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  block_device_mappings {
    device_name = data.aws_ami.this[each.value.ami].root_device_name

    ebs {
      volume_size           = each.value.root_volume_size
      volume_type           = "gp3"
      encrypted             = true
      kms_key_id            = var.ebs_kms_key_arn
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  user_data = base64encode(templatefile("${path.module}/templates/user_data.sh.tftpl", merge(local.user_data_common, {
    processes    = each.value.processes
    broker_scope = each.value.broker_scope
  })))

  dynamic "tag_specifications" {
    for_each = toset(["instance", "volume"])

    content {
      resource_type = tag_specifications.value
      tags          = merge(local.tags, { Name = "${local.name}-${each.key}" })
    }
  }

  tags = local.tags
}

resource "aws_autoscaling_group" "worker" {
  region = var.aws_region

  name                = local.worker_group_name
  vpc_zone_identifier = var.private_subnet_ids
  min_size            = var.worker_min_size
  max_size            = var.worker_max_size
  # No desired_capacity: the backlog policy owns it, and an apply must not undo a scale-out.

  default_instance_warmup = var.worker_warmup_seconds
  health_check_type       = "EC2"
  enabled_metrics = [
    "GroupDesiredCapacity",
    "GroupInServiceInstances",
    "GroupPendingInstances",
    "GroupTerminatingInstances",
  ]
  metrics_granularity = "1Minute"

  launch_template {
    id      = aws_launch_template.this["worker"].id
    version = aws_launch_template.this["worker"].latest_version
  }

  # Scale-in protection for running jobs: an instance chosen for termination (scale-in, instance
  # refresh, rebalancing) stays in Terminating:Wait while its drain agent stops the workers, which
  # take no new job and finish the running one, then completes this hook. The agent sends
  # heartbeats, so the hold lasts as long as the workers' stop timeout (job timeout + 60 s).
  initial_lifecycle_hook {
    name                 = local.drain_hook_name
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    heartbeat_timeout    = 300
    default_result       = "CONTINUE"
  }

  instance_refresh {
    strategy = "Rolling"

    preferences {
      min_healthy_percentage = 50
      skip_matching          = true
    }
  }

  dynamic "tag" {
    for_each = merge(local.tags, { Name = local.worker_group_name })

    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity]
  }
}

resource "aws_autoscaling_group" "cpu" {
  for_each = local.cpu_groups

  region = var.aws_region

  name                = "${local.name}-${each.key}"
  vpc_zone_identifier = var.private_subnet_ids
  min_size            = each.value.min_size
  max_size            = each.value.max_size

  default_instance_warmup = 300
  health_check_type       = "EC2"

  launch_template {
    id      = aws_launch_template.this[each.key].id
    version = aws_launch_template.this[each.key].latest_version
  }

  instance_refresh {
    strategy = "Rolling"

    preferences {
      # The router group has one instance: replace it (seconds without a routing table update) rather than stall.
      min_healthy_percentage = each.value.max_size > 1 ? 50 : 0
      skip_matching          = true
    }
  }

  dynamic "tag" {
    for_each = merge(local.tags, { Name = "${local.name}-${each.key}" })

    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity]
  }
}
