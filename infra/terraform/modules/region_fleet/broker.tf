################################################################################
# The region's broker: queues, job records and load reports
################################################################################

resource "random_password" "broker_auth_token" {
  # ElastiCache accepts 16-128 printable characters; letters and digits need no URL escaping.
  length  = 64
  special = false
}

resource "aws_secretsmanager_secret" "broker_auth_token" {
  #checkov:skip=CKV2_AWS_57:Rotating an ElastiCache auth token needs a coordinated ROTATE/SET on the replication group and a restart of every client; it is an operator runbook step (README, "Deploying a region"), not a Lambda rotation.
  region = var.aws_region

  name                    = local.broker_secret_name
  description             = "Auth token of the animfleet ${local.name} broker; instances read it at boot."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = var.secret_recovery_window_days

  tags = local.tags
}

resource "aws_secretsmanager_secret_version" "broker_auth_token" {
  region = var.aws_region

  secret_id     = aws_secretsmanager_secret.broker_auth_token.id
  secret_string = random_password.broker_auth_token.result
}

resource "aws_elasticache_subnet_group" "broker" {
  region = var.aws_region

  name        = "${local.name}-broker"
  description = "Private subnets of the animfleet ${local.name} broker"
  subnet_ids  = var.private_subnet_ids

  tags = local.tags
}

resource "aws_elasticache_parameter_group" "broker" {
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
# never be lost, use Amazon MemoryDB instead (a multi-zone transaction log; see the README).
resource "aws_elasticache_replication_group" "broker" {
  region = var.aws_region

  replication_group_id = "${local.name}-broker"
  description          = "Celery broker and job records of animfleet ${local.name}"

  engine               = "redis"
  engine_version       = var.broker_engine_version
  node_type            = var.broker_node_type
  num_cache_clusters   = var.broker_num_cache_clusters
  port                 = local.broker_port
  parameter_group_name = aws_elasticache_parameter_group.broker.name
  subnet_group_name    = aws_elasticache_subnet_group.broker.name
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
