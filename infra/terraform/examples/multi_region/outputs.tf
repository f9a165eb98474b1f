output "fleet_toml" {
  description = "The dispatcher's topology file, also written to ./fleet.toml and to SSM in every region."
  value       = local.fleet_toml
}

output "fleets" {
  description = "Per region: store, broker, cells, bucket, groups and the scaling target."
  value = {
    for name, fleet in module.fleet : name => {
      aws_region                = fleet.aws_region
      store_engine              = fleet.store_engine
      broker_engine             = fleet.broker_engine
      broker_url                = fleet.broker_url
      store_url                 = fleet.store_url
      cells                     = fleet.cells
      connection_secret_arn     = fleet.connection_secret_arn
      bucket_name               = fleet.bucket_name
      worker_groups             = fleet.worker_autoscaling_group_names
      version_worker_groups     = fleet.version_worker_autoscaling_group_names
      model_registry_uri        = fleet.model_registry_uri
      services_group            = fleet.services_autoscaling_group_name
      router_group              = fleet.router_autoscaling_group_name
      backlog_per_worker_target = fleet.backlog_per_worker_target
    }
  }
}
