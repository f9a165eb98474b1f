################################################################################
# Output bucket (or a reference to a shared one)
################################################################################

locals {
  bucket_name        = var.create_bucket ? aws_s3_bucket.outputs[0].bucket : var.bucket_name
  bucket_arn         = "arn:${local.partition}:s3:::${local.bucket_name}"
  bucket_region      = var.create_bucket ? var.aws_region : coalesce(var.bucket_region, var.aws_region)
  bucket_kms_key_arn = var.create_bucket ? aws_kms_key.this.arn : var.bucket_kms_key_arn
  outputs_arn        = "${local.bucket_arn}/${var.output_prefix}*"
  model_registry_arn = "${local.bucket_arn}/${local.model_registry_prefix}*"
}

resource "aws_s3_bucket" "outputs" {
  #checkov:skip=CKV_AWS_144:Outputs are regional by design and expire within days; cross-region replication would double the cost of data that the dispatcher never reads from another region.
  #checkov:skip=CKV_AWS_18:Outputs are downloaded through presigned URLs; object access is audited with CloudTrail data events at the account level, not per-bucket server access logs.
  #checkov:skip=CKV_AWS_21:Output keys are content-addressed and written once; versions would only keep expired outputs alive past the lifecycle rule.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events: the worker reports completion through the job record and the webhook sender.
  count = var.create_bucket ? 1 : 0

  region = var.aws_region

  bucket_prefix = substr("${local.name}-", 0, 37)

  tags = local.tags
}

resource "aws_s3_bucket_public_access_block" "outputs" {
  count = var.create_bucket ? 1 : 0

  region = var.aws_region

  bucket                  = aws_s3_bucket.outputs[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "outputs" {
  count = var.create_bucket ? 1 : 0

  region = var.aws_region

  bucket = aws_s3_bucket.outputs[0].id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "outputs" {
  count = var.create_bucket ? 1 : 0

  region = var.aws_region

  bucket = aws_s3_bucket.outputs[0].id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.this.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "outputs" {
  count = var.create_bucket ? 1 : 0

  region = var.aws_region

  bucket = aws_s3_bucket.outputs[0].id

  # Job outputs and archived job records expire; the model registry (`<prefix>models/`) shares the
  # storage prefix and must never expire, so the rules name the expiring folders, not the prefix.
  rule {
    id     = "expire-outputs"
    status = "Enabled"

    filter {
      prefix = "${var.output_prefix}outputs/"
    }

    expiration {
      days = var.output_expiry_days
    }
  }

  rule {
    id     = "expire-records"
    status = "Enabled"

    filter {
      prefix = "${var.output_prefix}records/"
    }

    expiration {
      days = var.output_expiry_days
    }
  }

  rule {
    id     = "abort-incomplete-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

data "aws_iam_policy_document" "outputs_bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      local.bucket_arn,
      "${local.bucket_arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid     = "DenyOutdatedTLS"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      local.bucket_arn,
      "${local.bucket_arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "outputs" {
  count = var.create_bucket ? 1 : 0

  region = var.aws_region

  bucket = aws_s3_bucket.outputs[0].id
  policy = data.aws_iam_policy_document.outputs_bucket.json

  # S3 rejects a policy written while the public access block is being changed.
  depends_on = [aws_s3_bucket_public_access_block.outputs]
}
