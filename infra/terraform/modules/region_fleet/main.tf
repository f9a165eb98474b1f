data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

locals {
  name       = "${var.name}-${var.fleet_region}"
  partition  = data.aws_partition.current.partition
  account_id = data.aws_caller_identity.current.account_id

  tags = merge(var.tags, {
    "animfleet:deployment" = var.name
    "animfleet:region"     = var.fleet_region
  })

  # The variables the processes read to override this region's broker and store URLs (see
  # animfleet.topology); a cell's store is overridden under the cell's name.
  broker_env_name = "ANIMFLEET_REGION_${upper(replace(var.fleet_region, "-", "_"))}_BROKER_URL"
  store_env_name  = "ANIMFLEET_REGION_${upper(replace(var.fleet_region, "-", "_"))}_STORE_URL"

  # Cells c1..cN. A region of one cell is not split: its one store is the region's (key c1).
  store_keys = [for k in range(1, var.cell_count + 1) : "c${k}"]
  cell_names = { for key in local.store_keys : key => "${var.fleet_region}-${key}" if var.cell_count > 1 }

  config_parameter_prefix = coalesce(var.config_parameter_prefix, "/${var.name}")
  fleet_parameter_name    = "${local.config_parameter_prefix}/fleet.toml"
  brokers_parameter_name  = "${local.config_parameter_prefix}/brokers.json"
  config_parameter_arns = [
    for parameter in [local.fleet_parameter_name, local.brokers_parameter_name] :
    "arn:${local.partition}:ssm:${var.aws_region}:${local.account_id}:parameter${parameter}"
  ]

  # Every region's connection secret is named alike, so the gateway and router of any region can
  # read them all without knowing the other regions' resources (which would be a dependency cycle).
  connection_secret_name     = "${var.name}/${var.fleet_region}/connections"
  all_connection_secrets_arn = "arn:${local.partition}:secretsmanager:*:${local.account_id}:secret:${var.name}/*/connections-??????"
  broker_port                = 6379
  mq_port                    = 5671
  backlog_per_worker_target  = var.acceptable_wait_seconds / var.job_duration_seconds

  # Model versions live in the region's bucket under the storage prefix that fleet.toml gives the
  # region (`output_prefix`): `<prefix>models/blobs/<sha256>` and
  # `<prefix>models/versions/<name>/<version>.json`. Only the operator's `animfleet model push`
  # writes there; the workers read it.
  model_registry_prefix = "${var.output_prefix}models/"
  worker_model_cache    = "/var/cache/animfleet/models"

  # The deployments as `animfleet deploy apply` reads them, without the rollback fields left out
  # (the Python defaults apply to those). Its hash names the file on the services instances and
  # the marker that makes the apply run once per change.
  deployments_json = length(var.deployments) == 0 ? "" : jsonencode({
    for name, deployment in var.deployments : name => merge(
      { versions = deployment.versions, stable = deployment.stable },
      {
        for key, rollback in { rollback = deployment.rollback } :
        key => { for field, value in rollback : field => value if value != null }
        if rollback != null
      },
    )
  })
  deployments_sha256 = sha256(local.deployments_json)
}

################################################################################
# Encryption key for the store, the broker, the connection secret and the output bucket
################################################################################

resource "aws_kms_key" "this" {
  #checkov:skip=CKV2_AWS_64:The default key policy delegates to IAM in this account; each instance role gets only kms:Decrypt/GenerateDataKey on this key, through a kms:ViaService condition.
  region = var.aws_region

  description             = "animfleet ${local.name}: store and broker at rest, connection secret, outputs"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_key_deletion_window_days

  tags = local.tags
}

resource "aws_kms_alias" "this" {
  region = var.aws_region

  name          = "alias/${local.name}"
  target_key_id = aws_kms_key.this.key_id
}
