################################################################################
# MemoryDB: each cell's store when `store_engine` is `memorydb`
#
# An acknowledged write is in MemoryDB's multi-zone transaction log before the client hears OK,
# so a primary failure loses no accepted job. MemoryDB runs in cluster mode only: every key of a
# region (or cell) shares one hash tag, so its scripts and transactions stay on one shard.
################################################################################

locals {
  memorydb = var.store_engine == "memorydb"

  # The processes' user may touch only animfleet's keys and channels: plain (`animfleet:...`) and
  # hash-tagged (`{animfleet...}`). Commands: reads, writes and MULTI/EXEC on those keys, pub/sub
  # (the prefetch channel), the scripts (EVAL, EVALSHA, SCRIPT LOAD/EXISTS, not SCRIPT FLUSH/KILL),
  # INFO (the sweeper reads the server's uptime) and what a cluster client needs to find the
  # slots (CLUSTER SLOTS/NODES, ASKING, COMMAND from @connection). Nothing @dangerous but INFO:
  # no KEYS, FLUSHALL, FLUSHDB, CONFIG, DEBUG, CLIENT KILL or MONITOR.
  store_access_string = "on ~animfleet:* ~{animfleet* &animfleet:* &{animfleet* -@all +@read +@write +@transaction +@pubsub +@connection +eval +evalsha +script|load +script|exists -@dangerous +info +cluster|slots +cluster|nodes +asking"
  store_user_name     = "${local.name}-app"
}

resource "random_password" "store_user" {
  count = local.memorydb ? 1 : 0

  # MemoryDB passwords are 16-128 printable characters; letters and digits need no URL escaping.
  length  = 64
  special = false
}

resource "aws_memorydb_subnet_group" "store" {
  count = local.memorydb ? 1 : 0

  region = var.aws_region

  name        = "${local.name}-store"
  description = "Private subnets of the animfleet ${local.name} region store"
  subnet_ids  = var.private_subnet_ids

  tags = local.tags
}

resource "aws_memorydb_parameter_group" "store" {
  count = local.memorydb ? 1 : 0

  region = var.aws_region

  name        = "${local.name}-store"
  description = "Region store settings for animfleet ${local.name}"
  family      = "memorydb_redis7"

  # A store must never evict: an evicted key is a lost job or a lost job record.
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }

  tags = local.tags
}

resource "aws_memorydb_user" "store" {
  count = local.memorydb ? 1 : 0

  region = var.aws_region

  user_name     = local.store_user_name
  access_string = local.store_access_string

  authentication_mode {
    type      = "password"
    passwords = [random_password.store_user[0].result]
  }

  tags = local.tags
}

# The ACL holds only the processes' user: MemoryDB's `default` user (open access) is left out.
resource "aws_memorydb_acl" "store" {
  count = local.memorydb ? 1 : 0

  region = var.aws_region

  name       = "${local.name}-store"
  user_names = [aws_memorydb_user.store[0].user_name]

  tags = local.tags
}

resource "aws_memorydb_cluster" "store" {
  for_each = local.memorydb ? toset(local.store_keys) : toset([])

  region = var.aws_region

  name        = "${local.name}-${each.key}"
  description = "Region store of animfleet ${local.name}${var.cell_count > 1 ? " cell ${each.key}" : ""}"

  engine                 = "redis"
  engine_version         = var.broker_engine_version
  node_type              = var.memorydb_node_type
  num_shards             = 1
  num_replicas_per_shard = var.memorydb_replicas_per_shard
  port                   = local.broker_port
  parameter_group_name   = aws_memorydb_parameter_group.store[0].name
  subnet_group_name      = aws_memorydb_subnet_group.store[0].name
  security_group_ids     = [aws_security_group.broker.id]

  acl_name    = aws_memorydb_acl.store[0].name
  tls_enabled = true
  kms_key_arn = aws_kms_key.this.arn

  auto_minor_version_upgrade = true
  snapshot_retention_limit   = var.broker_snapshot_retention_days

  tags = local.tags
}
