################################################################################
# Instance roles, one per process kind, each with only what that process does
################################################################################

locals {
  roles = merge(
    { worker = "GPU workers", services = "gateway and webhook sender" },
    var.create_router ? { router = "router" } : {},
  )

  role_policies = merge(
    {
      worker   = data.aws_iam_policy_document.worker.json
      services = data.aws_iam_policy_document.services.json
    },
    var.create_router ? { router = data.aws_iam_policy_document.router.json } : {},
  )
}

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  for_each = local.roles

  name               = "${local.name}-${each.key}"
  description        = "animfleet ${local.name} ${each.value}"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json

  tags = local.tags
}

resource "aws_iam_role_policy" "this" {
  for_each = local.role_policies

  name   = "${local.name}-${each.key}"
  role   = aws_iam_role.this[each.key].id
  policy = each.value
}

resource "aws_iam_role_policy_attachment" "session_manager" {
  for_each = var.enable_session_manager ? local.roles : {}

  role       = aws_iam_role.this[each.key].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "this" {
  for_each = local.roles

  name = "${local.name}-${each.key}"
  role = aws_iam_role.this[each.key].name

  tags = local.tags
}

# Statements more than one role shares.
data "aws_iam_policy_document" "fleet_config" {
  statement {
    sid       = "ReadFleetConfig"
    actions   = ["ssm:GetParameter"]
    resources = local.config_parameter_arns
  }
}

# The store, the broker and the instances' credentials to them (MemoryDB's ACL user, Amazon MQ's
# user, ElastiCache's auth token) take no IAM grant: the instances read only the connection
# secret. Workers read their own region's.
data "aws_iam_policy_document" "home_connections" {
  statement {
    sid       = "ReadHomeConnections"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.connections.arn]
  }

  statement {
    sid       = "DecryptHomeConnections"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${var.aws_region}.amazonaws.com"]
    }
  }
}

# The gateway and the router talk to every region's broker and store.
data "aws_iam_policy_document" "all_connections" {
  statement {
    sid       = "ReadEveryRegionsConnections"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [local.all_connection_secrets_arn]
  }

  statement {
    sid       = "DecryptEveryRegionsConnections"
    actions   = ["kms:Decrypt"]
    resources = ["arn:${local.partition}:kms:*:${local.account_id}:key/*"]

    condition {
      test     = "StringLike"
      variable = "kms:ViaService"
      values   = ["secretsmanager.*.amazonaws.com"]
    }

    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:SecretARN"
      values   = [local.all_connection_secrets_arn]
    }
  }
}

# Model versions are written only by the operator's `animfleet model push`. The outputs grants
# cover the whole storage prefix, which holds the registry too, so no instance may write there.
data "aws_iam_policy_document" "no_model_writes" {
  statement {
    sid    = "NeverWriteModelVersions"
    effect = "Deny"
    actions = [
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
    ]
    resources = [local.model_registry_arn]
  }
}

data "aws_iam_policy_document" "read_outputs" {
  statement {
    sid       = "ReadOutputs"
    actions   = ["s3:GetObject"]
    resources = [local.outputs_arn]
  }

  dynamic "statement" {
    for_each = local.bucket_kms_key_arn == null ? [] : [local.bucket_kms_key_arn]

    content {
      sid       = "DecryptOutputs"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${local.bucket_region}.amazonaws.com"]
      }
    }
  }
}

data "aws_iam_policy_document" "worker" {
  source_policy_documents = [
    data.aws_iam_policy_document.fleet_config.json,
    data.aws_iam_policy_document.home_connections.json,
    data.aws_iam_policy_document.no_model_writes.json,
  ]

  # Manifests and content-addressed blobs of the versions a worker preloads or is asked for; it
  # fetches them by key (the manifest names the blobs), so no listing.
  statement {
    sid       = "ReadModelVersions"
    actions   = ["s3:GetObject"]
    resources = [local.model_registry_arn]
  }

  # Delete: a run fenced off its job removes the output object it uploaded (its own key).
  statement {
    sid = "ReadWriteOutputs"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
    ]
    resources = [local.outputs_arn]
  }

  dynamic "statement" {
    for_each = local.bucket_kms_key_arn == null ? [] : [local.bucket_kms_key_arn]

    content {
      sid       = "EncryptOutputs"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${local.bucket_region}.amazonaws.com"]
      }
    }
  }

  statement {
    sid       = "ReadModelArtifacts"
    actions   = ["s3:GetObject"]
    resources = ["arn:${local.partition}:s3:::${var.model_artifacts.bucket}/${var.model_artifacts.prefix}*"]
  }

  statement {
    sid       = "ListModelArtifacts"
    actions   = ["s3:ListBucket"]
    resources = ["arn:${local.partition}:s3:::${var.model_artifacts.bucket}"]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.model_artifacts.prefix}*"]
    }
  }

  dynamic "statement" {
    for_each = var.model_artifacts.kms_key_arn == null ? [] : [var.model_artifacts.kms_key_arn]

    content {
      sid       = "DecryptModelArtifacts"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }

  # The drain agent holds a terminating instance until its running jobs finish.
  statement {
    sid = "DrainOnScaleIn"
    actions = [
      "autoscaling:CompleteLifecycleAction",
      "autoscaling:RecordLifecycleActionHeartbeat",
    ]
    resources = [for group in aws_autoscaling_group.worker : group.arn]
  }
}

data "aws_iam_policy_document" "services" {
  source_policy_documents = [
    data.aws_iam_policy_document.fleet_config.json,
    data.aws_iam_policy_document.all_connections.json,
    data.aws_iam_policy_document.read_outputs.json,
    data.aws_iam_policy_document.no_model_writes.json,
  ]
}

data "aws_iam_policy_document" "router" {
  source_policy_documents = [
    data.aws_iam_policy_document.fleet_config.json,
    data.aws_iam_policy_document.all_connections.json,
  ]

  # PutMetricData has no resource type: "*" is the narrowest resource, the namespace condition
  # is what confines it.
  statement {
    sid       = "PublishFleetMetrics"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]

    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metrics_namespace]
    }
  }
}
