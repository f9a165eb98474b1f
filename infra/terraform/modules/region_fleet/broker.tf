################################################################################
# ElastiCache (Redis OSS): each cell's store when `store_engine` is `elasticache` (also the
# Celery broker of a `redis` region), or the Celery broker alone next to MemoryDB stores
################################################################################

locals {
  # Group c1 keeps the id of the region's single broker from before cells, so that adding the
  # variables replaces nothing.
  elasticache_groups = merge(
    var.store_engine == "elasticache" ? {
      for key in local.store_keys : key => key == "c1" ? "${local.name}-broker" : "${local.name}-${key}"
    } : {},
    var.store_engine == "memorydb" && var.broker_engine == "redis" ? { celery = "${local.name}-celery" } : {},
  )
  # The group that carries the Celery queues of a `redis` region.
  redis_broker_group = var.store_engine == "elasticache" ? "c1" : "celery"
}

resource "random_password" "broker_auth_token" {
  # ElastiCache accepts 16-128 printable characters; letters and digits need no URL escaping.
  length  = 64
  special = false
}

resource "aws_elasticache_subnet_group" "broker" {
  count = length(local.elasticache_groups) > 0 ? 1 : 0

  region = var.aws_region

  name        = "${local.name}-broker"
  description = "Private subnets of the animfleet ${local.name} broker"
  subnet_ids  = var.private_subnet_ids

  tags = local.tags
}

resource "aws_elasticache_parameter_group" "broker" {
  count = length(local.elasticache_groups) > 0 ? 1 : 0

  region = var.aws_region

  name        = "${local.name}-broker"
  description = "Celery broker settings for animfleet ${local.name}"
  family      = "redis7"

  # A broker must never evict: an evicted key is a lost job or a lost job record.
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }

  tags = local.tags
}

# Loss window: replication to the replica is asynchronous, so a primary failover can drop the
# last writes (typically under a second): jobs acknowledged to callers in that window vanish.
# Losing every node loses everything since the last daily snapshot. Where an accepted job must
# never be lost, set `store_engine = "memorydb"` (a multi-zone transaction log; see the docs).
moved {
  from = aws_elasticache_replication_group.broker
  to   = aws_elasticache_replication_group.redis["c1"]
}

moved {
  from = aws_elasticache_subnet_group.broker
  to   = aws_elasticache_subnet_group.broker[0]
}

moved {
  from = aws_elasticache_parameter_group.broker
  to   = aws_elasticache_parameter_group.broker[0]
}

resource "aws_elasticache_replication_group" "redis" {
  for_each = local.elasticache_groups

  region = var.aws_region

  replication_group_id = each.value
  description          = each.key == "celery" ? "Celery broker of animfleet ${local.name}" : "Region store${each.key == local.redis_broker_group && var.broker_engine == "redis" ? " and Celery broker" : ""} of animfleet ${local.name}${var.cell_count > 1 ? " cell ${each.key}" : ""}"

  engine               = "redis"
  engine_version       = var.broker_engine_version
  node_type            = var.broker_node_type
  num_cache_clusters   = var.broker_num_cache_clusters
  port                 = local.broker_port
  parameter_group_name = aws_elasticache_parameter_group.broker[0].name
  subnet_group_name    = aws_elasticache_subnet_group.broker[0].name
  security_group_ids   = [aws_security_group.broker.id]

  automatic_failover_enabled = true
  multi_az_enabled           = true

  at_rest_encryption_enabled = true
  kms_key_id                 = aws_kms_key.this.arn
  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  auth_token                 = random_password.broker_auth_token.result
  auth_token_update_strategy = "ROTATE"

  auto_minor_version_upgrade = true
  snapshot_retention_limit   = var.broker_snapshot_retention_days

  tags = local.tags
}
