"""Deliberately broken copies of infra/terraform are caught by the checks the real one passes."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import terraform_checks as checks
from conftest import TerraformTools
from test_checkov import failed_ids, run_checkov


@dataclass(frozen=True)
class Breakage:
    id: str
    file: str  # relative to infra/terraform
    old: str
    new: str
    problem: str  # a fragment of the structural check's message
    checkov: frozenset[str] = frozenset()  # checks checkov must fail on it too

    def apply(self, root: Path) -> None:
        path = root / self.file
        text = path.read_text()
        assert self.old in text, f"{self.id}: {self.old!r} not in {self.file}; update the test"
        path.write_text(text.replace(self.old, self.new))


MODULE = "modules/region_fleet"
EXAMPLE = "examples/multi_region"

BREAKAGES = [
    Breakage(
        "public-bucket",
        f"{MODULE}/storage.tf",
        "  block_public_acls       = true\n  block_public_policy     = true\n"
        "  ignore_public_acls      = true\n  restrict_public_buckets = true",
        "  block_public_acls       = false\n  block_public_policy     = false\n"
        "  ignore_public_acls      = false\n  restrict_public_buckets = false",
        "block_public_policy is not true",
        frozenset({"CKV_AWS_53", "CKV_AWS_54", "CKV_AWS_55", "CKV_AWS_56"}),
    ),
    Breakage(
        "imdsv1",
        f"{MODULE}/compute.tf",
        'http_tokens                 = "required"',
        'http_tokens                 = "optional"',
        "IMDSv2 is not required",
        frozenset({"CKV_AWS_79"}),
    ),
    Breakage(
        "star-action",
        f"{MODULE}/iam.tf",
        'actions   = ["ssm:GetParameter"]',
        'actions   = ["*"]',
        "wildcard action '*'",
        frozenset({"CKV_AWS_49"}),
    ),
    Breakage(
        "service-wide-action",
        f"{MODULE}/iam.tf",
        '      "s3:GetObject",\n      "s3:PutObject",',
        '      "s3:*",',
        "wildcard action 's3:*'",
    ),
    Breakage(
        "star-resource",
        f"{MODULE}/iam.tf",
        "resources = [for group in aws_autoscaling_group.worker : group.arn]",
        'resources = ["*"]',
        "resource '*' for ['autoscaling:CompleteLifecycleAction'",
    ),
    Breakage(
        "inline-json-policy",
        f"{MODULE}/iam.tf",
        "  policy = each.value\n",
        '  policy = jsonencode({ Statement = [{ Effect = "Allow", Action = "*" }] })\n',
        "policy is not an aws_iam_policy_document",
    ),
    Breakage(
        "broker-without-tls",
        f"{MODULE}/broker.tf",
        "transit_encryption_enabled = true",
        "transit_encryption_enabled = false",
        "transit_encryption_enabled is not true",
        frozenset({"CKV_AWS_30"}),
    ),
    Breakage(
        "every-secret-readable",
        f"{MODULE}/main.tf",
        ":secret:${var.name}/*/connections-??????",
        ":secret:*",
        "not limited to connection secrets",
    ),
    Breakage(
        "workers-read-another-secret",
        f"{MODULE}/iam.tf",
        "resources = [aws_secretsmanager_secret.connections.arn]",
        "resources = [aws_secretsmanager_secret.connections.arn, var.bucket_kms_key_arn]",
        "reads secrets",
    ),
    Breakage(
        "workers-manage-memorydb",
        f"{MODULE}/iam.tf",
        'actions   = ["secretsmanager:GetSecretValue"]\n    resources = [aws_secretsmanager_secret',
        'actions   = ["memorydb:Connect"]\n    resources = [aws_secretsmanager_secret',
        "instances may manage ['memorydb:Connect']",
    ),
    Breakage(
        "memorydb-without-tls",
        f"{MODULE}/memorydb.tf",
        "tls_enabled = true",
        "tls_enabled = false",
        "tls_enabled is not true",
    ),
    Breakage(
        "memorydb-open-access",
        f"{MODULE}/memorydb.tf",
        "acl_name    = aws_memorydb_acl.store[0].name",
        'acl_name    = "open-access"',
        "not on the module's ACL",
    ),
    Breakage(
        "public-rabbitmq",
        f"{MODULE}/rabbitmq.tf",
        "publicly_accessible = false",
        "publicly_accessible = true",
        "publicly accessible",
    ),
    Breakage(
        "rabbitmq-single-instance",
        f"{MODULE}/rabbitmq.tf",
        'deployment_mode    = "CLUSTER_MULTI_AZ"',
        'deployment_mode    = "SINGLE_INSTANCE"',
        "deployment_mode is not CLUSTER_MULTI_AZ",
    ),
    Breakage(
        "store-password-output",
        f"{MODULE}/outputs.tf",
        'value       = local.stores["c1"].url',
        'value       = local.stores["c1"].userinfo',
        "exposes a secret without sensitive = true",
    ),
    Breakage(
        "unencrypted-root-volume",
        f"{MODULE}/compute.tf",
        "      encrypted             = true",
        "      encrypted             = false",
        "not encrypted",
    ),
    Breakage(
        "token-in-user-data",
        f"{MODULE}/compute.tf",
        "    fleet_region      = var.fleet_region\n",
        "    fleet_region      = var.fleet_region\n"
        "    broker_token      = random_password.broker_auth_token.result\n",
        "(user data) refers to a secret",
    ),
    Breakage(
        "token-output",
        f"{MODULE}/outputs.tf",
        "value       = aws_secretsmanager_secret.connections.arn",
        "value       = random_password.broker_auth_token.result",
        "exposes a secret without sensitive = true",
    ),
    Breakage(
        "internet-to-gateway",
        f"{MODULE}/security_groups.tf",
        "  cidr_ipv4         = each.value\n\n  tags = local.tags\n}\n\nresource "
        '"aws_vpc_security_group_egress_rule" "to_broker"',
        '  cidr_ipv4         = "0.0.0.0/0"\n\n  tags = local.tags\n}\n\nresource '
        '"aws_vpc_security_group_egress_rule" "to_broker"',
        "ingress from the whole internet",
    ),
    Breakage(
        "ingress-to-workers",
        f"{MODULE}/security_groups.tf",
        "security_group_id = aws_security_group.services.id",
        "security_group_id = aws_security_group.worker.id",
        "GPU workers serve nothing",
    ),
    Breakage(
        "variable-without-description",
        f"{MODULE}/variables.tf",
        '  description = "Tags merged into the tags of every resource."\n',
        "",
        "variable tags: no description",
    ),
    Breakage(
        "variable-without-type",
        f"{EXAMPLE}/variables.tf",
        "  type        = map(list(string))\n",
        "",
        "variable alarm_actions: no type",
    ),
    Breakage(
        "untagged-resource",
        f"{MODULE}/main.tf",
        "  deletion_window_in_days = var.kms_key_deletion_window_days\n\n  tags = local.tags\n",
        "  deletion_window_in_days = var.kms_key_deletion_window_days\n",
        "aws_kms_key.this: tags do not merge",
    ),
    Breakage(
        "example-without-for-each",
        f"{EXAMPLE}/main.tf",
        "  for_each = local.regions\n\n  name         = var.name",
        "\n  name         = var.name",
        "not instantiated per region with for_each",
    ),
    Breakage(
        "workers-write-models",
        f"{MODULE}/iam.tf",
        '    sid       = "ReadModelVersions"\n    actions   = ["s3:GetObject"]',
        '    sid       = "ReadModelVersions"\n    actions   = ["s3:GetObject", "s3:PutObject"]',
        "allows ['s3:PutObject'] on the model registry",
    ),
    Breakage(
        "services-without-model-deny",
        f"{MODULE}/iam.tf",
        "    data.aws_iam_policy_document.read_outputs.json,\n"
        "    data.aws_iam_policy_document.no_model_writes.json,",
        "    data.aws_iam_policy_document.read_outputs.json,",
        "services: may write model versions",
    ),
    Breakage(
        "unjustified-skip",
        f"{MODULE}/connections.tf",
        "#checkov:skip=CKV2_AWS_57:The credentials",
        "#checkov:skip=CKV2_AWS_57:later\n  #The credentials",
        "skip of CKV2_AWS_57 is not justified",
    ),
]


def broken_copy(tmp_path: Path, breakage: Breakage) -> Path:
    root = tmp_path / "terraform"
    shutil.copytree(
        checks.TERRAFORM,
        root,
        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "fleet.toml", "tools"),
    )
    breakage.apply(root)
    return root


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda b: b.id)
def test_structural_checks_catch(breakage: Breakage, tmp_path: Path) -> None:
    root = broken_copy(tmp_path, breakage)

    problems = checks.all_problems(root)

    assert any(breakage.problem in problem for problem in problems), problems


@pytest.mark.parametrize("breakage", [b for b in BREAKAGES if b.checkov], ids=lambda b: b.id)
def test_checkov_catches(
    breakage: Breakage, tmp_path: Path, terraform_tools: TerraformTools
) -> None:
    root = broken_copy(tmp_path, breakage)

    failed = failed_ids(run_checkov(terraform_tools, root))

    assert breakage.checkov <= failed, f"checkov failed only {sorted(failed)}"
