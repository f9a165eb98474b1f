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
  drain_hook_name = "drain-running-jobs"

  # Everything here ends up in user data, which anyone allowed to describe the instance can read:
  # no token, password or broker URL with credentials. The instance fetches those at boot.
  user_data_common = {
    fleet_region      = var.fleet_region
    aws_region        = var.aws_region
    package_spec      = var.package_spec
    pip_index_url     = var.pip_index_url == null ? "" : var.pip_index_url
    python_version    = var.python_version
    uv_version        = var.uv_version
    fleet_parameter   = local.fleet_parameter_name
    brokers_parameter = local.brokers_parameter_name
    environment       = var.environment
    gateway_port      = var.gateway_port
    stop_timeout      = var.job_timeout_seconds + 60
    model_bucket      = var.model_artifacts.bucket
    model_prefix      = var.model_artifacts.prefix
    drain_hook_name   = local.drain_hook_name
    model_cache       = local.worker_model_cache
  }

  # GPU worker groups: the shared one (key `worker`) preloads every listed version that has no
  # group of its own; each `version_worker_groups` entry gets a group that preloads only its
  # version. Names carry a readable slug of the version and a hash that keeps them unique.
  version_group_keys = {
    for ref in keys(var.version_worker_groups) :
    ref => "worker-${trim(substr(replace(ref, "/[^a-z0-9]+/", "-"), 0, 24), "-")}-${substr(sha256(ref), 0, 8)}"
  }

  # The shared GPU group: one per cell (`worker-c<k>`, its workers serve that cell only), or
  # `worker` for a whole region. Each is sized by worker_min_size/worker_max_size.
  shared_worker_groups = {
    for key in local.store_keys : (var.cell_count == 1 ? "worker" : "worker-${key}") => lookup(local.cell_names, key, "")
  }

  worker_groups = merge(
    {
      for group, cell in local.shared_worker_groups : group => {
        version  = null
        cell     = cell
        models   = [for ref in var.model_versions : ref if !contains(keys(var.version_worker_groups), ref)]
        min_size = var.worker_min_size
        max_size = var.worker_max_size
      }
    },
    {
      for ref, group in var.version_worker_groups : local.version_group_keys[ref] => {
        version  = ref
        cell     = ""
        models   = [ref]
        min_size = group.min_size
        max_size = group.max_size
      }
    },
  )

  ami_parameters = {
    gpu = var.gpu_ami_ssm_parameter
    cpu = var.cpu_ami_ssm_parameter
  }

  cpu_groups = merge(
    {
      services = {
        processes = ["web", "webhooks", "scheduler", "sweeper"]
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

  # One launch template per process group; `role` picks the instance profile and security group.
  launch_groups = merge(
    {
      for group, spec in local.worker_groups : group => {
        description      = spec.version == null ? "GPU worker: one Celery worker per GPU" : "GPU worker for ${spec.version}: one Celery worker per GPU"
        role             = "worker"
        ami              = "gpu"
        instance_type    = var.gpu_instance_type
        root_volume_size = var.gpu_root_volume_size
        processes        = ["worker"]
        broker_scope     = "home"
        worker_models    = join(",", spec.models)
        worker_cell      = spec.cell
        deployments_json = ""
      }
    },
    {
      for group, spec in local.cpu_groups : group => {
        description      = join(" + ", spec.processes)
        role             = group
        ami              = "cpu"
        instance_type    = var.cpu_instance_type
        root_volume_size = 30
        processes        = spec.processes
        broker_scope     = "all"
        worker_models    = ""
        worker_cell      = ""
        # Only the services group applies the region's deployments (see the user data).
        deployments_json = group == "services" ? local.deployments_json : ""
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

  vpc_security_group_ids = [local.security_groups[each.value.role]]

  iam_instance_profile {
    arn = aws_iam_instance_profile.this[each.value.role].arn
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
    processes          = each.value.processes
    broker_scope       = each.value.broker_scope
    worker_group_name  = "${local.name}-${each.key}"
    worker_models      = each.value.worker_models
    worker_cell        = each.value.worker_cell
    deployments_json   = each.value.deployments_json
    deployments_sha256 = local.deployments_sha256
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

# The shared group is `worker["worker"]`; one more per `version_worker_groups` entry.
moved {
  from = aws_autoscaling_group.worker
  to   = aws_autoscaling_group.worker["worker"]
}

resource "aws_autoscaling_group" "worker" {
  for_each = local.worker_groups

  region = var.aws_region

  name                = "${local.name}-${each.key}"
  vpc_zone_identifier = var.private_subnet_ids
  min_size            = each.value.min_size
  max_size            = each.value.max_size
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
    id      = aws_launch_template.this[each.key].id
    version = aws_launch_template.this[each.key].latest_version
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
    for_each = merge(
      local.tags,
      { Name = "${local.name}-${each.key}" },
      each.value.version == null ? {} : { "animfleet:model-version" = each.value.version },
      each.value.cell == "" ? {} : { "animfleet:cell" = each.value.cell },
    )

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
