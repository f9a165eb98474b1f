# Every store/broker/cell combination of modules/region_fleet, planned and applied against the
# mocked AWS provider (tests/infra/test_engines.py copies the module next to this file and passes
# the required variables, terraform_checks.MODULE_TFVARS, with -var-file).
mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
  }
  mock_data "aws_ami" {
    defaults = { root_device_name = "/dev/sda1" }
  }
  mock_resource "aws_elasticache_replication_group" {
    defaults = { primary_endpoint_address = "master.redis.cache.amazonaws.com" }
  }
  mock_resource "aws_memorydb_cluster" {
    defaults = { cluster_endpoint = [{ address = "clustercfg.store.memorydb.us-east-1.amazonaws.com", port = 6379 }] }
  }
  mock_resource "aws_mq_broker" {
    defaults = { instances = [{ console_url = "https://console", ip_address = "", endpoints = ["amqps://b-1.mq.us-east-1.amazonaws.com:5671"] }] }
  }
  mock_resource "aws_iam_role" {
    defaults = { arn = "arn:aws:iam::123456789012:role/x" }
  }
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::123456789012:instance-profile/x" }
  }
  mock_resource "aws_launch_template" {
    defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
  }
  mock_resource "aws_kms_key" {
    defaults = { arn = "arn:aws:kms:us-east-1:123456789012:key/x" }
  }
  mock_resource "aws_secretsmanager_secret" {
    defaults = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:animfleet/us-east/connections-abcdef" }
  }
  mock_resource "aws_autoscaling_group" {
    defaults = { arn = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:x" }
  }
  mock_resource "aws_autoscaling_policy" {
    defaults = { arn = "arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:x" }
  }
}

run "elasticache_redis_whole_region" {
  command = apply

  assert {
    condition     = keys(aws_elasticache_replication_group.redis) == ["c1"] && aws_elasticache_replication_group.redis["c1"].replication_group_id == "animfleet-us-east-broker"
    error_message = "one ElastiCache group, keeping the id of the region's broker"
  }
  assert {
    condition     = length(aws_memorydb_cluster.store) == 0 && length(aws_mq_broker.rabbitmq) == 0
    error_message = "neither MemoryDB nor Amazon MQ"
  }
  assert {
    condition = jsondecode(nonsensitive(aws_secretsmanager_secret_version.connections.secret_string)) == {
      ANIMFLEET_REGION_US_EAST_BROKER_URL = "rediss://:password0123456789@master.redis.cache.amazonaws.com:6379/0?ssl_cert_reqs=required"
      ANIMFLEET_REGION_US_EAST_STORE_URL  = "rediss://:password0123456789@master.redis.cache.amazonaws.com:6379/0?ssl_cert_reqs=required"
    }
    error_message = "one Redis for the store and the broker"
  }
  assert {
    condition     = output.cells == [] && keys(output.worker_autoscaling_group_names) == ["worker"] && output.store_url == output.broker_url
    error_message = "a whole region"
  }
}

run "elasticache_rabbitmq" {
  command = apply

  variables {
    broker_engine = "rabbitmq"
  }

  assert {
    condition     = aws_mq_broker.rabbitmq[0].deployment_mode == "CLUSTER_MULTI_AZ" && aws_mq_broker.rabbitmq[0].engine_type == "RabbitMQ" && !aws_mq_broker.rabbitmq[0].publicly_accessible
    error_message = "a private three-node RabbitMQ cluster"
  }
  assert {
    condition     = aws_mq_broker.rabbitmq[0].security_groups == toset([aws_security_group.mq[0].id]) && keys(aws_vpc_security_group_ingress_rule.mq_from_fleet) == ["services", "worker"]
    error_message = "RabbitMQ admits only the fleet's groups"
  }
  assert {
    condition = jsondecode(nonsensitive(aws_secretsmanager_secret_version.connections.secret_string)) == {
      ANIMFLEET_REGION_US_EAST_BROKER_URL = "amqps://animfleet:password0123456789@b-1.mq.us-east-1.amazonaws.com:5671"
      ANIMFLEET_REGION_US_EAST_STORE_URL  = "rediss://:password0123456789@master.redis.cache.amazonaws.com:6379/0?ssl_cert_reqs=required"
    }
    error_message = "broker on RabbitMQ, store on ElastiCache"
  }
  assert {
    condition     = output.broker_url == "amqps://b-1.mq.us-east-1.amazonaws.com:5671" && output.security_group_ids.mq == aws_security_group.mq[0].id
    error_message = "outputs without credentials"
  }
}

run "memorydb_redis" {
  command = apply

  variables {
    store_engine = "memorydb"
  }

  assert {
    condition     = keys(aws_elasticache_replication_group.redis) == ["celery"] && keys(aws_memorydb_cluster.store) == ["c1"]
    error_message = "MemoryDB store and an ElastiCache Redis for Celery alone"
  }
  assert {
    condition     = aws_memorydb_cluster.store["c1"].tls_enabled && aws_memorydb_cluster.store["c1"].acl_name == aws_memorydb_acl.store[0].name && aws_memorydb_cluster.store["c1"].num_replicas_per_shard >= 1 && aws_memorydb_cluster.store["c1"].snapshot_retention_limit >= 1
    error_message = "TLS, the ACL, a replica in another zone and snapshots"
  }
  assert {
    condition     = aws_memorydb_acl.store[0].user_names == toset(["animfleet-us-east-app"])
    error_message = "the ACL holds only the processes' user"
  }
  assert {
    condition = jsondecode(nonsensitive(aws_secretsmanager_secret_version.connections.secret_string)) == {
      ANIMFLEET_REGION_US_EAST_BROKER_URL = "rediss://:password0123456789@master.redis.cache.amazonaws.com:6379/0?ssl_cert_reqs=required"
      ANIMFLEET_REGION_US_EAST_STORE_URL  = "rediss+cluster://animfleet-us-east-app:password0123456789@clustercfg.store.memorydb.us-east-1.amazonaws.com:6379?ssl_cert_reqs=required"
    }
    error_message = "store on MemoryDB in cluster mode, broker on Redis"
  }
}

run "memorydb_rabbitmq_cells" {
  command = apply

  variables {
    store_engine  = "memorydb"
    broker_engine = "rabbitmq"
    cell_count    = 2
  }

  assert {
    condition     = keys(aws_memorydb_cluster.store) == ["c1", "c2"] && length(aws_elasticache_replication_group.redis) == 0
    error_message = "one MemoryDB cluster per cell, no ElastiCache"
  }
  assert {
    condition = jsondecode(nonsensitive(aws_secretsmanager_secret_version.connections.secret_string)) == {
      ANIMFLEET_REGION_US_EAST_BROKER_URL    = "amqps://animfleet:password0123456789@b-1.mq.us-east-1.amazonaws.com:5671"
      ANIMFLEET_REGION_US_EAST_STORE_URL     = "rediss+cluster://animfleet-us-east-app:password0123456789@clustercfg.store.memorydb.us-east-1.amazonaws.com:6379?ssl_cert_reqs=required"
      ANIMFLEET_REGION_US_EAST_C1_STORE_URL  = "rediss+cluster://animfleet-us-east-app:password0123456789@clustercfg.store.memorydb.us-east-1.amazonaws.com:6379?ssl_cert_reqs=required"
      ANIMFLEET_REGION_US_EAST_C2_STORE_URL  = "rediss+cluster://animfleet-us-east-app:password0123456789@clustercfg.store.memorydb.us-east-1.amazonaws.com:6379?ssl_cert_reqs=required"
    }
    error_message = "a store URL per cell"
  }
  assert {
    condition     = [for cell in output.cells : cell.name] == ["us-east-c1", "us-east-c2"]
    error_message = "the outputs list the cells"
  }
}

run "elasticache_redis_three_cells" {
  command = apply

  variables {
    cell_count = 3
  }

  assert {
    condition     = [for key, group in aws_elasticache_replication_group.redis : group.replication_group_id] == ["animfleet-us-east-broker", "animfleet-us-east-c2", "animfleet-us-east-c3"]
    error_message = "a group per cell; c1 keeps the region's broker"
  }
  assert {
    condition     = keys(aws_autoscaling_group.worker) == ["worker-c1", "worker-c2", "worker-c3"] && keys(aws_autoscaling_policy.worker_backlog) == ["worker-c1", "worker-c2", "worker-c3"]
    error_message = "a GPU group per cell, each scaled"
  }
  assert {
    condition     = anytrue([for tag in aws_autoscaling_group.worker["worker-c2"].tag : tag.key == "animfleet:cell" && tag.value == "us-east-c2"])
    error_message = "the cell's group is tagged with the cell"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.worker_idle["worker-c1"].threshold == 3
    error_message = "scale-in waits for an idle worker per group"
  }
}

run "dedicated_version_groups_need_one_cell" {
  command = plan

  variables {
    cell_count            = 2
    model_versions        = ["big@1"]
    version_worker_groups = { "big@1" = { min_size = 0, max_size = 1 } }
  }

  expect_failures = [var.version_worker_groups]
}

run "unknown_engines_are_refused" {
  command = plan

  variables {
    store_engine  = "dynamodb"
    broker_engine = "sqs"
    cell_count    = 0
  }

  expect_failures = [var.store_engine, var.broker_engine, var.cell_count]
}
