################################################################################
# Security groups: each process gets exactly the connections it makes or serves
################################################################################

locals {
  # HTTPS out: AWS APIs (S3, Secrets Manager, SSM, CloudWatch, Auto Scaling), the package index at
  # boot and, for the webhook sender, customers' https:// endpoints.
  https_anywhere = "0.0.0.0/0"

  client_groups = merge(
    {
      worker   = aws_security_group.worker.id
      services = aws_security_group.services.id
    },
    var.create_router ? { router = aws_security_group.router[0].id } : {},
  )

  # The gateway publishes spilled-over jobs to other regions' brokers; the router reads their load.
  remote_broker_clients = merge(
    { services = aws_security_group.services.id },
    var.create_router ? { router = aws_security_group.router[0].id } : {},
  )
  remote_broker_rules = {
    for pair in setproduct(keys(local.remote_broker_clients), var.remote_broker_cidr_blocks) :
    "${pair[0]}-${pair[1]}" => { group = pair[0], cidr = pair[1] }
  }
}

resource "aws_security_group" "broker" {
  region = var.aws_region

  name        = "${local.name}-broker"
  description = "animfleet ${local.name} Redis broker: TLS Redis from the fleet's processes only"
  vpc_id      = var.vpc_id

  tags = merge(local.tags, { Name = "${local.name}-broker" })
}

resource "aws_security_group" "worker" {
  region = var.aws_region

  name        = "${local.name}-worker"
  description = "animfleet ${local.name} GPU workers: no inbound; Redis to the broker, HTTPS out"
  vpc_id      = var.vpc_id

  tags = merge(local.tags, { Name = "${local.name}-worker" })
}

resource "aws_security_group" "services" {
  region = var.aws_region

  name        = "${local.name}-services"
  description = "animfleet ${local.name} gateway and webhook sender: gateway port from allowed networks"
  vpc_id      = var.vpc_id

  tags = merge(local.tags, { Name = "${local.name}-services" })
}

resource "aws_security_group" "router" {
  count = var.create_router ? 1 : 0

  region = var.aws_region

  name        = "${local.name}-router"
  description = "animfleet ${local.name} router: no inbound; Redis to every broker, HTTPS out"
  vpc_id      = var.vpc_id

  tags = merge(local.tags, { Name = "${local.name}-router" })
}

resource "aws_vpc_security_group_ingress_rule" "broker_from_fleet" {
  for_each = local.client_groups

  region = var.aws_region

  security_group_id            = aws_security_group.broker.id
  description                  = "TLS Redis from the ${each.key} instances"
  ip_protocol                  = "tcp"
  from_port                    = local.broker_port
  to_port                      = local.broker_port
  referenced_security_group_id = each.value

  tags = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "broker_from_remote" {
  for_each = toset(var.remote_broker_client_cidr_blocks)

  region = var.aws_region

  security_group_id = aws_security_group.broker.id
  description       = "TLS Redis from gateways and the router in other regions"
  ip_protocol       = "tcp"
  from_port         = local.broker_port
  to_port           = local.broker_port
  cidr_ipv4         = each.value

  tags = local.tags
}

resource "aws_vpc_security_group_egress_rule" "to_broker" {
  for_each = local.client_groups

  region = var.aws_region

  security_group_id            = each.value
  description                  = "TLS Redis to the region's stores and Redis broker"
  ip_protocol                  = "tcp"
  from_port                    = local.broker_port
  to_port                      = local.broker_port
  referenced_security_group_id = aws_security_group.broker.id

  tags = local.tags
}

resource "aws_vpc_security_group_egress_rule" "to_remote_brokers" {
  for_each = local.remote_broker_rules

  region = var.aws_region

  security_group_id = local.remote_broker_clients[each.value.group]
  description       = "TLS Redis to other regions' stores and Redis brokers"
  ip_protocol       = "tcp"
  from_port         = local.broker_port
  to_port           = local.broker_port
  cidr_ipv4         = each.value.cidr

  tags = local.tags
}

# RabbitMQ (`broker_engine = "rabbitmq"`): AMQP over TLS from the same processes, nothing else.
resource "aws_vpc_security_group_ingress_rule" "mq_from_fleet" {
  for_each = local.rabbitmq ? local.client_groups : {}

  region = var.aws_region

  security_group_id            = aws_security_group.mq[0].id
  description                  = "AMQPS from the ${each.key} instances"
  ip_protocol                  = "tcp"
  from_port                    = local.mq_port
  to_port                      = local.mq_port
  referenced_security_group_id = each.value

  tags = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "mq_from_remote" {
  for_each = local.rabbitmq ? toset(var.remote_broker_client_cidr_blocks) : toset([])

  region = var.aws_region

  security_group_id = aws_security_group.mq[0].id
  description       = "AMQPS from gateways and the router in other regions"
  ip_protocol       = "tcp"
  from_port         = local.mq_port
  to_port           = local.mq_port
  cidr_ipv4         = each.value

  tags = local.tags
}

resource "aws_vpc_security_group_egress_rule" "to_mq" {
  for_each = local.rabbitmq ? local.client_groups : {}

  region = var.aws_region

  security_group_id            = each.value
  description                  = "AMQPS to the region's RabbitMQ broker"
  ip_protocol                  = "tcp"
  from_port                    = local.mq_port
  to_port                      = local.mq_port
  referenced_security_group_id = aws_security_group.mq[0].id

  tags = local.tags
}

# Other regions may run RabbitMQ brokers whatever this one runs.
resource "aws_vpc_security_group_egress_rule" "to_remote_mq" {
  for_each = local.remote_broker_rules

  region = var.aws_region

  security_group_id = local.remote_broker_clients[each.value.group]
  description       = "AMQPS to other regions' RabbitMQ brokers"
  ip_protocol       = "tcp"
  from_port         = local.mq_port
  to_port           = local.mq_port
  cidr_ipv4         = each.value.cidr

  tags = local.tags
}

resource "aws_vpc_security_group_egress_rule" "https" {
  for_each = local.client_groups

  region = var.aws_region

  security_group_id = each.value
  description       = "HTTPS to AWS APIs, the package index and webhook endpoints"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = local.https_anywhere

  tags = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "gateway" {
  for_each = toset(var.gateway_ingress_cidr_blocks)

  region = var.aws_region

  security_group_id = aws_security_group.services.id
  description       = "HTTP gateway from the web backends"
  ip_protocol       = "tcp"
  from_port         = var.gateway_port
  to_port           = var.gateway_port
  cidr_ipv4         = each.value

  tags = local.tags
}
