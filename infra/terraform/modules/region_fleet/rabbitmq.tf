################################################################################
# Amazon MQ for RabbitMQ: the Celery broker when `broker_engine` is `rabbitmq`
#
# Three nodes in three availability zones behind one TLS endpoint (amqps, 5671). The workers
# declare quorum queues (replicated by Raft, with a delivery limit for poison messages) and
# publish with confirms: a confirmed message survives the loss of one node of the three.
################################################################################

locals {
  rabbitmq       = var.broker_engine == "rabbitmq"
  mq_user_name   = "animfleet"
  mq_broker_name = "${local.name}-broker"
}

resource "random_password" "mq_user" {
  count = local.rabbitmq ? 1 : 0

  # Amazon MQ: 12-250 characters, no comma, colon or equals sign; letters and digits need no URL
  # escaping.
  length  = 64
  special = false
}

resource "aws_security_group" "mq" {
  count = local.rabbitmq ? 1 : 0

  region = var.aws_region

  name        = "${local.name}-mq"
  description = "animfleet ${local.name} RabbitMQ broker: AMQPS from the fleet's processes only"
  vpc_id      = var.vpc_id

  tags = merge(local.tags, { Name = "${local.name}-mq" })
}

resource "aws_mq_broker" "rabbitmq" {
  #checkov:skip=CKV_AWS_197:Amazon MQ for RabbitMQ has no audit log (an ActiveMQ feature); its general log goes to CloudWatch Logs.
  count = local.rabbitmq ? 1 : 0

  region = var.aws_region

  broker_name        = local.mq_broker_name
  engine_type        = "RabbitMQ"
  engine_version     = var.mq_engine_version
  host_instance_type = var.mq_instance_type
  deployment_mode    = "CLUSTER_MULTI_AZ"

  publicly_accessible = false
  subnet_ids          = var.private_subnet_ids
  security_groups     = [aws_security_group.mq[0].id]

  auto_minor_version_upgrade = true

  encryption_options {
    use_aws_owned_key = false
    kms_key_id        = aws_kms_key.this.arn
  }

  logs {
    general = true
  }

  user {
    username = local.mq_user_name
    password = random_password.mq_user[0].result
  }

  tags = local.tags
}
