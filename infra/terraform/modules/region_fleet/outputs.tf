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

output "store_engine" {
  description = "Where the region store lives: `elasticache` or `memorydb`."
  value       = var.store_engine
}

output "broker_engine" {
  description = "The Celery broker: `redis` or `rabbitmq`."
  value       = var.broker_engine
}

output "broker_url" {
  description = "The broker URL without credentials, as fleet.toml carries it (`rediss://...` or `amqps://...:5671`). Processes get the full URL from ANIMFLEET_REGION_<NAME>_BROKER_URL, which each instance sets at boot from the connection secret."
  value       = local.broker.url
}

output "store_url" {
  description = "The region store's URL without credentials (`rediss://...`, or `rediss+cluster://...` on MemoryDB); with cells, cell c1's. Processes get the full URL from ANIMFLEET_REGION_<NAME>_STORE_URL."
  value       = local.stores["c1"].url
}

output "cells" {
  description = "The region's cells (empty when `cell_count` is 1): name, store endpoint and URL without credentials, the variable that carries the full URL on the instances, and the cell's GPU group."
  value = [
    for cell in local.cells : {
      name                          = cell.name
      store_host                    = local.stores[cell.key].host
      store_port                    = local.stores[cell.key].port
      store_url                     = cell.store_url
      store_env_name                = cell.env_name
      worker_autoscaling_group_name = aws_autoscaling_group.worker["worker-${cell.key}"].name
    }
  ]
}

output "broker_env_name" {
  description = "The environment variable that carries this region's full broker URL on the instances."
  value       = local.broker_env_name
}

output "store_env_name" {
  description = "The environment variable that carries this region's full store URL on the instances."
  value       = local.store_env_name
}

output "connection_secret_arn" {
  description = "Secrets Manager secret holding the broker and store URLs with their credentials, as a JSON map of environment variables (its value is never an output)."
  value       = aws_secretsmanager_secret.connections.arn
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
  description = "KMS key encrypting the stores, the broker, the connection secret and the created output bucket."
  value       = aws_kms_key.this.arn
}

output "fleet_parameter_name" {
  description = "SSM parameter, in this AWS region, that must hold the deployment's fleet.toml."
  value       = local.fleet_parameter_name
}

output "brokers_parameter_name" {
  description = "SSM parameter, in this AWS region, that must hold brokers.json: {region: {secret_arn}}, every region's connection secret."
  value       = local.brokers_parameter_name
}

output "worker_autoscaling_group_names" {
  description = "The shared GPU worker groups: `worker`, or `worker-c<k>` per cell."
  value       = { for group in keys(local.shared_worker_groups) : group => aws_autoscaling_group.worker[group].name }
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
  description = "Security groups by kind (broker: the Redis stores and broker; mq: the RabbitMQ broker; worker, services, router)."
  value       = merge({ broker = aws_security_group.broker.id }, { for group in aws_security_group.mq : "mq" => group.id }, local.security_groups)
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
