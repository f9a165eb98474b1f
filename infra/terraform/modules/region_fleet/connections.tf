################################################################################
# Connection URLs: without credentials for fleet.toml and the outputs, with them only in the
# region's connection secret, which the instances read at boot
################################################################################

locals {
  # Each store (c1 is the region's) as fleet.toml names it, and the credentials it takes.
  stores = merge(
    {
      for key, group in aws_elasticache_replication_group.redis : key => {
        host     = group.primary_endpoint_address
        port     = local.broker_port
        url      = "rediss://${group.primary_endpoint_address}:${local.broker_port}/0?ssl_cert_reqs=required"
        userinfo = ":${random_password.broker_auth_token.result}"
      } if key != "celery"
    },
    {
      for key, cluster in aws_memorydb_cluster.store : key => {
        host     = cluster.cluster_endpoint[0].address
        port     = cluster.cluster_endpoint[0].port
        url      = "rediss+cluster://${cluster.cluster_endpoint[0].address}:${cluster.cluster_endpoint[0].port}?ssl_cert_reqs=required"
        userinfo = "${local.store_user_name}:${one(random_password.store_user[*].result)}"
      }
    },
  )

  # The Celery broker: a Redis group (a store's own, or the `celery` group next to MemoryDB) or
  # the RabbitMQ cluster's amqps endpoint (`amqps://<host>:5671`, the default vhost).
  brokers = merge(
    {
      for key, group in aws_elasticache_replication_group.redis : "redis" => {
        url      = "rediss://${group.primary_endpoint_address}:${local.broker_port}/0?ssl_cert_reqs=required"
        userinfo = ":${random_password.broker_auth_token.result}"
      } if var.broker_engine == "redis" && key == local.redis_broker_group
    },
    {
      for broker in aws_mq_broker.rabbitmq : "rabbitmq" => {
        url      = broker.instances[0].endpoints[0]
        userinfo = "${local.mq_user_name}:${one(random_password.mq_user[*].result)}"
      }
    },
  )
  broker = one(values(local.brokers))

  # Cells as fleet.toml lists them (`[regions.<region>.cells.<key>]`), empty for a whole region.
  cells = [
    for key, cell in local.cell_names : {
      key       = key
      name      = cell
      store_url = local.stores[key].url
      env_name  = "ANIMFLEET_REGION_${upper(replace(cell, "-", "_"))}_STORE_URL"
    }
  ]
}

resource "aws_secretsmanager_secret" "connections" {
  #checkov:skip=CKV2_AWS_57:The credentials inside rotate with the engines (ElastiCache ROTATE/SET, MemoryDB and Amazon MQ user updates) and a restart of every client; that is an operator runbook step (docs/deploying.md, "Rotate the credentials"), not a Lambda rotation.
  region = var.aws_region

  name                    = local.connection_secret_name
  description             = "animfleet ${local.name}: broker and store URLs with credentials, as environment variables; instances read it at boot."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = var.secret_recovery_window_days

  tags = local.tags
}

# {"ANIMFLEET_REGION_<NAME>_BROKER_URL": ..., "ANIMFLEET_REGION_<NAME>_STORE_URL": ..., and one
# `..._STORE_URL` per cell}: the instances write these into their environment as they are.
resource "aws_secretsmanager_secret_version" "connections" {
  region = var.aws_region

  secret_id = aws_secretsmanager_secret.connections.id
  secret_string = jsonencode(merge(
    {
      (local.broker_env_name) = replace(local.broker.url, "://", "://${local.broker.userinfo}@")
      (local.store_env_name)  = replace(local.stores["c1"].url, "://", "://${local.stores["c1"].userinfo}@")
    },
    {
      for cell in local.cells : cell.env_name => replace(cell.store_url, "://", "://${local.stores[cell.key].userinfo}@")
    },
  ))
}
