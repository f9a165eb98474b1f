################################################################################
# What the dispatcher's topology file (fleet.toml) and brokers.json need
################################################################################

output "fleet_region" {
  description = "The animfleet region name (the key in fleet.toml)."
  value       = var.fleet_region
}

output "aws_region" {
  description = "The AWS region the fleet runs in."
  value       = var.aws_region
}

output "broker_host" {
  description = "Primary endpoint of the region's Redis broker."
  value       = aws_elasticache_replication_group.broker.primary_endpoint_address
}

output "broker_port" {
  description = "TCP port of the region's Redis broker (TLS only)."
  value       = local.broker_port
}

output "broker_url" {
  description = "The broker URL without credentials, as fleet.toml carries it. Processes get the full URL, token included, from ANIMFLEET_REGION_<NAME>_BROKER_URL, which each instance builds at boot."
  value       = "rediss://${aws_elasticache_replication_group.broker.primary_endpoint_address}:${local.broker_port}/0?ssl_cert_reqs=required"
}

output "broker_env_name" {
  description = "The environment variable that carries this region's full broker URL on the instances."
  value       = local.broker_env_name
}

output "broker_auth_token_secret_arn" {
  description = "Secrets Manager secret holding the broker's auth token (the token itself is never an output)."
  value       = aws_secretsmanager_secret.broker_auth_token.arn
}

output "bucket_name" {
  description = "The output bucket."
  value       = local.bucket_name
}

output "bucket_region" {
  description = "AWS region of the output bucket (fleet.toml `storage.region_name`)."
  value       = local.bucket_region
}

output "output_prefix" {
  description = "Key prefix of the outputs in the bucket (fleet.toml `storage.prefix`)."
  value       = var.output_prefix
}

output "kms_key_arn" {
  description = "KMS key encrypting the broker, its auth token and the created output bucket."
  value       = aws_kms_key.this.arn
}

output "fleet_parameter_name" {
  description = "SSM parameter, in this AWS region, that must hold the deployment's fleet.toml."
  value       = local.fleet_parameter_name
}

output "brokers_parameter_name" {
  description = "SSM parameter, in this AWS region, that must hold brokers.json: {region: {host, port, secret_arn}}."
  value       = local.brokers_parameter_name
}

output "worker_autoscaling_group_name" {
  description = "The GPU worker group."
  value       = aws_autoscaling_group.worker["worker"].name
}

output "version_worker_autoscaling_group_names" {
  description = "The dedicated GPU worker groups by model version (`version_worker_groups`)."
  value       = { for ref, key in local.version_group_keys : ref => aws_autoscaling_group.worker[key].name }
}

output "model_registry_uri" {
  description = "Where `animfleet model push` puts this region's model versions (manifests and blobs); only the operator writes there."
  value       = "s3://${local.bucket_name}/${local.model_registry_prefix}"
}

output "services_autoscaling_group_name" {
  description = "The CPU group running `web`, `webhooks`, `scheduler` and `sweeper`."
  value       = aws_autoscaling_group.cpu["services"].name
}

output "router_autoscaling_group_name" {
  description = "The router's single-instance group, or null when the router runs in another region."
  value       = var.create_router ? aws_autoscaling_group.cpu["router"].name : null
}

output "security_group_ids" {
  description = "Security groups by process kind (broker, worker, services, router)."
  value       = merge({ broker = aws_security_group.broker.id }, local.security_groups)
}

output "iam_role_arns" {
  description = "Instance roles by process kind."
  value       = { for kind, role in aws_iam_role.this : kind => role.arn }
}

output "metrics_namespace" {
  description = "CloudWatch namespace the router must publish the fleet metrics to."
  value       = var.metrics_namespace
}

output "backlog_per_worker_target" {
  description = "Backlog per live worker that still starts within the acceptable wait (acceptable wait / job duration)."
  value       = local.backlog_per_worker_target
}

output "scaling_signal_target" {
  description = "The scaling target: (backlog + in flight) per live worker, 1 + backlog_per_worker_target."
  value       = local.scaling_signal_target
}
