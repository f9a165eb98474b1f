"""Structural checks of the Terraform in infra/terraform, run on parsed HCL (python-hcl2).

Each ``check_*`` function takes the root of a Terraform tree laid out like ``infra/terraform``
(``modules/region_fleet``, ``examples/multi_region``) and returns a list of problems, each a
human-readable line naming the file and the block; an empty list means the tree passes. The tests
run them on the real tree (expecting nothing) and on deliberately broken copies (expecting the
breakage to be named).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import hcl2
except ImportError as error:  # pragma: no cover - a setup problem, not a test outcome
    raise ImportError(
        "the Terraform checks parse HCL with python-hcl2, a dev dependency of the project: "
        "`.venv/bin/pip install python-hcl2`"
    ) from error

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "infra" / "terraform"
MODULE = Path("modules/region_fleet")
EXAMPLE = Path("examples/multi_region")

# The module's required variables, as a tfvars file: the inputs the tests that run Terraform on
# the module start from.
MODULE_TFVARS = """
name               = "animfleet"
fleet_region       = "us-east"
aws_region         = "us-east-1"
vpc_id             = "vpc-0123456789abcdef0"
private_subnet_ids = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
package_spec       = "animfleet==0.1.0"
model_artifacts    = { bucket = "models-us-east-1", prefix = "student/v1/" }
"""

# Actions that have no resource type: "*" is the narrowest resource they accept, so a statement
# may use it only for them, and only with a condition that confines it.
RESOURCELESS_ACTIONS = frozenset({"cloudwatch:PutMetricData"})

# Resource types that take no `tags` argument (tags go on their parent or do not exist).
UNTAGGABLE = frozenset(
    {
        "aws_autoscaling_group",  # tagged through `tag` blocks, checked separately
        "aws_autoscaling_policy",
        "aws_iam_role_policy",
        "aws_iam_role_policy_attachment",
        "aws_kms_alias",
        "aws_s3_bucket_lifecycle_configuration",
        "aws_s3_bucket_ownership_controls",
        "aws_s3_bucket_policy",
        "aws_s3_bucket_public_access_block",
        "aws_s3_bucket_server_side_encryption_configuration",
        "aws_secretsmanager_secret_version",
        "local_file",
        "random_password",
    }
)

# Variables a caller can plausibly get wrong; each must carry a validation block.
MUST_VALIDATE = frozenset(
    {
        "name",
        "fleet_region",
        "aws_region",
        "vpc_id",
        "private_subnet_ids",
        "package_spec",
        "gpu_instance_type",
        "gpu_ami_ssm_parameter",
        "worker_min_size",
        "worker_max_size",
        "job_duration_seconds",
        "acceptable_wait_seconds",
        "job_timeout_seconds",
        "model_artifacts",
        "gateway_ingress_cidr_blocks",
        "remote_broker_client_cidr_blocks",
        "remote_broker_cidr_blocks",
        "broker_num_cache_clusters",
        "store_engine",
        "broker_engine",
        "cell_count",
        "memorydb_replicas_per_shard",
        "mq_instance_type",
        "mq_engine_version",
        "bucket_name",
        "output_prefix",
        "output_expiry_days",
        "environment",
        "alarm_actions",
    }
)

SECRET_REFERENCE = re.compile(r"random_password\.|\bauth_token\b|secret_string|userinfo")
SKIP_COMMENT = re.compile(r"checkov:skip=([A-Z0-9_]*)(?::(.*))?")

_OPTIONS = hcl2.SerializationOptions(with_comments=False, strip_string_quotes=True)


@dataclass(frozen=True)
class Block:
    """One top-level block: ``resource "type" "name"`` has kind, type and name."""

    file: Path
    kind: str
    type: str
    name: str
    body: dict[str, Any]

    def __str__(self) -> str:
        label = ".".join(part for part in (self.type, self.name) if part)
        return f"{self.file.name}: {self.kind} {label}"


def tf_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.tf") if ".terraform" not in path.parts)


def parse(path: Path) -> dict[str, Any]:
    return _parse_text(path.read_text())


@functools.lru_cache(maxsize=512)
def _parse_text(text: str) -> dict[str, Any]:
    # Cached by content: every check walks every file, and the copies differ in one file only.
    # Callers must not mutate the result.
    return dict(hcl2.loads(text, serialization_options=_OPTIONS))


def blocks(root: Path, kind: str) -> Iterator[Block]:
    """Every top-level block of ``kind`` (resource, data, variable, output, module, locals)."""
    for path in tf_files(root):
        for entry in parse(path).get(kind, []):
            if kind in ("resource", "data"):
                for type_, named in entry.items():
                    for name, body in named.items():
                        yield Block(path, kind, type_, name, body)
            elif kind == "locals":
                yield Block(path, kind, "", "", entry)
            else:
                for name, body in entry.items():
                    yield Block(path, kind, "", name, body)


def first(body: dict[str, Any], key: str) -> dict[str, Any]:
    """A nested block that appears once (hcl2 gives a list), or {} when absent."""
    value = body.get(key) or [{}]
    return dict(value[0]) if isinstance(value, list) else dict(value)


def is_true(value: Any) -> bool:
    return value is True or value == "true" or value == "${true}"


def _statements(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from document.get("statement", [])
    for dynamic in document.get("dynamic", []):
        if "statement" in dynamic:
            yield from dynamic["statement"].get("content", [])


################################################################################
# The checks
################################################################################


def check_variables_typed_and_described(root: Path) -> list[str]:
    problems = []
    for variable in blocks(root, "variable"):
        for attribute in ("type", "description"):
            if not str(variable.body.get(attribute, "")).strip():
                problems.append(f"{variable}: no {attribute}")
    return problems


def check_variables_validated(root: Path) -> list[str]:
    declared = {v.name: v for v in blocks(root / MODULE, "variable")}
    problems = [f"module variable {name} is not declared" for name in MUST_VALIDATE - set(declared)]
    for name in sorted(MUST_VALIDATE & set(declared)):
        if not declared[name].body.get("validation"):
            problems.append(f"{declared[name]}: a plausible mistake here has no validation")
    return problems


def check_outputs_described(root: Path) -> list[str]:
    return [
        f"{output}: no description"
        for output in blocks(root, "output")
        if not str(output.body.get("description", "")).strip()
    ]


def check_iam_least_privilege(root: Path) -> list[str]:
    problems = []
    for document in blocks(root, "data"):
        if document.type != "aws_iam_policy_document":
            continue
        for statement in _statements(document.body):
            if statement.get("effect", "Allow") != "Allow":
                continue  # Deny statements are meant to be broad.
            sid = statement.get("sid", "?")
            actions = [str(a) for a in statement.get("actions", [])]
            for action in actions:
                if action == "*" or action.endswith(":*"):
                    problems.append(f"{document} statement {sid}: wildcard action {action!r}")
            if statement.get("not_actions") or statement.get("not_resources"):
                problems.append(f"{document} statement {sid}: NotAction/NotResource grants")
            if "*" in statement.get("resources", []):
                if not set(actions) <= RESOURCELESS_ACTIONS:
                    problems.append(
                        f"{document} statement {sid}: resource '*' for {actions}, which take "
                        "narrower resources"
                    )
                elif not statement.get("condition"):
                    problems.append(f"{document} statement {sid}: resource '*' with no condition")
    # Inline JSON policies would dodge the check above.
    local_values = {
        name: str(value)
        for local_block in blocks(root, "locals")
        for name, value in local_block.body.items()
    }
    for resource in blocks(root, "resource"):
        for attribute in ("policy", "assume_role_policy"):
            value = str(resource.body.get(attribute, ""))
            if not value:
                continue
            value = value.replace("each.value", str(resource.body.get("for_each", "")))
            value = re.sub(
                r"local\.(\w+)", lambda m: local_values.get(m.group(1), m.group(0)), value
            )
            if "data.aws_iam_policy_document." not in value or "jsonencode(" in value:
                problems.append(f"{resource}: {attribute} is not an aws_iam_policy_document")
    return problems


# What writes or deletes an object; none of it may be allowed on the model registry.
S3_WRITE_ACTIONS = frozenset(
    {"s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ReplicateObject"}
)
# Instance roles whose grants cover the storage prefix that also holds the model registry.
MODEL_REGISTRY_READERS = ("worker", "services")


def check_model_registry_read_only(root: Path) -> list[str]:
    """Only the operator writes model versions: no instance role may write `<prefix>models/`.

    The outputs grants cover the whole storage prefix, registry included, so the worker and
    services documents must take the explicit Deny (`no_model_writes`), and no Allow may name
    the registry with a write action.
    """
    problems = []
    documents = {
        d.name: d for d in blocks(root / MODULE, "data") if d.type == "aws_iam_policy_document"
    }
    deny = documents.get("no_model_writes")
    denied: set[str] = set()
    if deny is None:
        problems.append("no aws_iam_policy_document.no_model_writes denying writes to models/")
    else:
        for statement in _statements(deny.body):
            if statement.get("effect") == "Deny" and "${local.model_registry_arn}" in statement.get(
                "resources", []
            ):
                denied |= {str(a) for a in statement.get("actions", [])}
        if not {"s3:PutObject", "s3:DeleteObject"} <= denied:
            problems.append(f"{deny}: does not deny s3:PutObject and s3:DeleteObject on models/")
    for role in MODEL_REGISTRY_READERS:
        document = documents.get(role)
        if document is None:
            problems.append(f"no aws_iam_policy_document.{role}")
        elif "data.aws_iam_policy_document.no_model_writes.json" not in str(
            document.body.get("source_policy_documents", "")
        ):
            problems.append(f"{document}: may write model versions (no no_model_writes Deny)")
    for document in documents.values():
        for statement in _statements(document.body):
            if statement.get("effect", "Allow") != "Allow":
                continue
            writes = S3_WRITE_ACTIONS & {str(a) for a in statement.get("actions", [])}
            registry = [r for r in statement.get("resources", []) if "model_registry" in str(r)]
            if writes and registry:
                problems.append(
                    f"{document} statement {statement.get('sid', '?')}: allows {sorted(writes)} "
                    "on the model registry"
                )
    return problems


def check_imdsv2_required(root: Path) -> list[str]:
    problems = []
    for resource in blocks(root, "resource"):
        if resource.type not in ("aws_launch_template", "aws_instance"):
            continue
        metadata = first(resource.body, "metadata_options")
        if metadata.get("http_tokens") != "required":
            problems.append(f"{resource}: IMDSv2 is not required (http_tokens != 'required')")
        if metadata.get("http_endpoint") != "enabled":
            problems.append(f"{resource}: metadata endpoint not explicitly enabled")
    return problems


def check_volumes_encrypted(root: Path) -> list[str]:
    problems = []
    for resource in blocks(root, "resource"):
        if resource.type != "aws_launch_template":
            continue
        mappings = resource.body.get("block_device_mappings", [])
        if not mappings:
            problems.append(f"{resource}: root volume not declared (so not encrypted)")
        for mapping in mappings:
            if not is_true(first(mapping, "ebs").get("encrypted")):
                problems.append(f"{resource}: volume {mapping.get('device_name')} not encrypted")
    return problems


def check_bucket_private(root: Path) -> list[str]:
    problems = []
    resources = list(blocks(root, "resource"))
    by_type: dict[str, list[Block]] = {}
    for resource in resources:
        by_type.setdefault(resource.type, []).append(resource)
    buckets = by_type.get("aws_s3_bucket", [])
    for bucket in buckets:
        ref = f"aws_s3_bucket.{bucket.name}"
        for required in (
            "aws_s3_bucket_public_access_block",
            "aws_s3_bucket_server_side_encryption_configuration",
            "aws_s3_bucket_lifecycle_configuration",
            "aws_s3_bucket_policy",
        ):
            if not any(ref in str(r.body.get("bucket")) for r in by_type.get(required, [])):
                problems.append(f"{bucket}: no {required}")
    for block in by_type.get("aws_s3_bucket_public_access_block", []):
        for flag in (
            "block_public_acls",
            "block_public_policy",
            "ignore_public_acls",
            "restrict_public_buckets",
        ):
            if not is_true(block.body.get(flag)):
                problems.append(f"{block}: {flag} is not true (the bucket can become public)")
    for acl in by_type.get("aws_s3_bucket_acl", []):
        if "public" in str(acl.body.get("acl", "")):
            problems.append(f"{acl}: public ACL")
    for lifecycle in by_type.get("aws_s3_bucket_lifecycle_configuration", []):
        if not any(rule.get("expiration") for rule in lifecycle.body.get("rule", [])):
            problems.append(f"{lifecycle}: outputs never expire")
    for policy in by_type.get("aws_s3_bucket_policy", []):
        name = str(policy.body.get("policy", "")).split("aws_iam_policy_document.")[-1]
        name = name.split(".")[0]
        documents = [
            d
            for d in blocks(root, "data")
            if d.type == "aws_iam_policy_document" and d.name == name
        ]
        denies_plain_http = any(
            statement.get("effect") == "Deny"
            and any(
                c.get("variable") == "aws:SecureTransport" and c.get("values") == ["false"]
                for c in statement.get("condition", [])
            )
            for document in documents
            for statement in _statements(document.body)
        )
        if not denies_plain_http:
            problems.append(f"{policy}: does not deny requests without TLS")
    return problems


def check_broker_encrypted(root: Path) -> list[str]:
    problems = []
    groups = [r for r in blocks(root, "resource") if r.type == "aws_elasticache_replication_group"]
    if not groups:
        problems.append("no aws_elasticache_replication_group broker")
    for group in groups:
        for flag in ("transit_encryption_enabled", "at_rest_encryption_enabled"):
            if not is_true(group.body.get(flag)):
                problems.append(f"{group}: {flag} is not true")
        if "random_password." not in str(group.body.get("auth_token", "")):
            problems.append(f"{group}: no generated auth_token")
        if not group.body.get("subnet_group_name"):
            problems.append(f"{group}: not placed in the private subnet group")
    return problems


CONNECTION_SECRETS = frozenset(
    {"${aws_secretsmanager_secret.connections.arn}", "${local.all_connection_secrets_arn}"}
)


def check_secrets_read_are_connection_secrets(root: Path) -> list[str]:
    """Instances read the connection secrets and nothing else, and never manage the engines."""
    problems = []
    local_values = {
        name: str(value)
        for local_block in blocks(root / MODULE, "locals")
        for name, value in local_block.body.items()
    }
    if not local_values.get("all_connection_secrets_arn", "").endswith("/connections-??????"):
        problems.append("local all_connection_secrets_arn is not limited to connection secrets")
    for document in blocks(root, "data"):
        if document.type != "aws_iam_policy_document":
            continue
        for statement in _statements(document.body):
            if statement.get("effect", "Allow") != "Allow":
                continue
            sid = statement.get("sid", "?")
            actions = {str(a) for a in statement.get("actions", [])}
            resources = {str(r) for r in statement.get("resources", [])}
            if any(a.startswith("secretsmanager:") for a in actions) and not (
                resources <= CONNECTION_SECRETS
            ):
                problems.append(f"{document} statement {sid}: reads secrets {sorted(resources)}")
            engines = [a for a in actions if a.split(":")[0] in ("memorydb", "mq", "elasticache")]
            if engines:
                problems.append(f"{document} statement {sid}: instances may manage {engines}")
    return problems


def check_memorydb_store(root: Path) -> list[str]:
    """MemoryDB: TLS, KMS, a replica per shard, snapshots, an ACL of one scoped password user."""
    problems = []
    resources = [r for r in blocks(root, "resource") if r.type.startswith("aws_memorydb_")]
    clusters = [r for r in resources if r.type == "aws_memorydb_cluster"]
    if not clusters:
        problems.append("no aws_memorydb_cluster store")
    for cluster in clusters:
        if not is_true(cluster.body.get("tls_enabled")):
            problems.append(f"{cluster}: tls_enabled is not true")
        if "aws_memorydb_acl." not in str(cluster.body.get("acl_name", "")):
            problems.append(f"{cluster}: not on the module's ACL (open-access lets anyone in)")
        for attribute in ("kms_key_arn", "snapshot_retention_limit", "num_replicas_per_shard"):
            if not cluster.body.get(attribute):
                problems.append(f"{cluster}: no {attribute}")
    for user in (r for r in resources if r.type == "aws_memorydb_user"):
        mode = first(user.body, "authentication_mode")
        if mode.get("type") != "password" or "random_password." not in str(mode.get("passwords")):
            problems.append(f"{user}: not authenticated by a generated password")
        if "local.store_access_string" not in str(user.body.get("access_string")):
            problems.append(f"{user}: access string is not the scoped store_access_string")
    for acl in (r for r in resources if r.type == "aws_memorydb_acl"):
        if "aws_memorydb_user." not in str(acl.body.get("user_names")):
            problems.append(f"{acl}: holds a user other than the module's")
    return problems


def check_rabbitmq_broker(root: Path) -> list[str]:
    """Amazon MQ: RabbitMQ, three zones, private, on its own security group, CMK, logs on."""
    problems = []
    brokers = [r for r in blocks(root, "resource") if r.type == "aws_mq_broker"]
    if not brokers:
        problems.append("no aws_mq_broker")
    for broker in brokers:
        expected = {"engine_type": "RabbitMQ", "deployment_mode": "CLUSTER_MULTI_AZ"}
        for attribute, value in expected.items():
            if broker.body.get(attribute) != value:
                problems.append(f"{broker}: {attribute} is not {value}")
        if broker.body.get("publicly_accessible") not in (False, "false", "${false}"):
            problems.append(f"{broker}: publicly accessible")
        if str(broker.body.get("security_groups")) != "['${aws_security_group.mq[0].id}']":
            problems.append(f"{broker}: not on its own security group alone")
        encryption = first(broker.body, "encryption_options")
        if not encryption.get("kms_key_id") or is_true(encryption.get("use_aws_owned_key")):
            problems.append(f"{broker}: not encrypted with the region's key")
        if not is_true(first(broker.body, "logs").get("general")):
            problems.append(f"{broker}: general logs off")
        if "random_password." not in str(first(broker.body, "user").get("password")):
            problems.append(f"{broker}: no generated password")
    return problems


def check_secrets_stay_secret(root: Path) -> list[str]:
    """The broker token never reaches user data, and outputs that touch it are sensitive."""
    problems = []
    for resource in blocks(root, "resource"):
        if SECRET_REFERENCE.search(str(resource.body.get("user_data", ""))):
            problems.append(f"{resource}: user data refers to a secret")
    for local_block in blocks(root, "locals"):
        for name, value in local_block.body.items():
            if "user_data" in name and SECRET_REFERENCE.search(str(value)):
                problems.append(f"{local_block}: local {name} (user data) refers to a secret")
    for output in blocks(root, "output"):
        value = str(output.body.get("value", ""))
        if SECRET_REFERENCE.search(value) and not is_true(output.body.get("sensitive")):
            problems.append(f"{output}: exposes a secret without sensitive = true")
    return problems


def check_security_groups(root: Path) -> list[str]:
    problems = []
    for rule in blocks(root, "resource"):
        if rule.type == "aws_vpc_security_group_ingress_rule":
            if rule.body.get("cidr_ipv4") == "0.0.0.0/0" or rule.body.get("cidr_ipv6") == "::/0":
                problems.append(f"{rule}: ingress from the whole internet")
            if rule.body.get("ip_protocol") in ("-1", "all"):
                problems.append(f"{rule}: ingress on every protocol and port")
            if str(rule.body.get("security_group_id")) == "${aws_security_group.worker.id}":
                problems.append(f"{rule}: GPU workers serve nothing and must admit nothing")
        if rule.type == "aws_vpc_security_group_egress_rule" and rule.body.get("ip_protocol") in (
            "-1",
            "all",
        ):
            problems.append(f"{rule}: egress on every protocol and port")
        if rule.type == "aws_security_group" and (
            rule.body.get("ingress") or rule.body.get("egress")
        ):
            problems.append(f"{rule}: inline rules (use the per-rule resources)")
    return problems


def check_tags_merged(root: Path) -> list[str]:
    problems = []
    for resource in blocks(root, "resource"):
        if resource.type in UNTAGGABLE:
            continue
        tags = str(resource.body.get("tags", ""))
        if "local.tags" not in tags and "var.tags" not in tags:
            problems.append(f"{resource}: tags do not merge the `tags` variable")
    for group in blocks(root, "resource"):
        if group.type != "aws_autoscaling_group":
            continue
        dynamic_tags = [d["tag"] for d in group.body.get("dynamic", []) if "tag" in d]
        if not any("local.tags" in str(tag.get("for_each")) for tag in dynamic_tags):
            problems.append(f"{group}: instances do not get the `tags` variable")
    return problems


def check_example_per_region(root: Path) -> list[str]:
    problems = []
    modules = [m for m in blocks(root / EXAMPLE, "module")]
    fleets = [m for m in modules if m.body.get("source") == "../../modules/region_fleet"]
    if len(fleets) != 1:
        problems.append(f"the example has {len(fleets)} region_fleet module blocks, wants one")
    for fleet in fleets:
        if not str(fleet.body.get("for_each", "")).strip():
            problems.append(f"{fleet}: not instantiated per region with for_each")
        if fleet.body.get("fleet_region") != "${each.key}":
            problems.append(f"{fleet}: fleet_region is not the map key")
        if fleet.body.get("aws_region") != "${each.value.aws_region}":
            problems.append(f"{fleet}: aws_region does not come from the region map")
    regions = [v for v in blocks(root / EXAMPLE, "variable") if v.name == "regions"]
    if not regions or len(_default_of(regions[0])) < 3:
        problems.append("the example's `regions` map does not default to three regions")
    rendered = [
        r
        for r in blocks(root / EXAMPLE, "resource")
        if r.type == "local_file" and "fleet_toml" in str(r.body.get("content"))
    ]
    fleet_toml = [
        value
        for local_block in blocks(root / EXAMPLE, "locals")
        for name, value in local_block.body.items()
        if name == "fleet_toml"
    ]
    if not rendered or not any(
        "templatefile(" in str(v) and "module.fleet" in str(v) for v in fleet_toml
    ):
        problems.append("the example does not render fleet.toml from the module outputs")
    return problems


def _default_of(variable: Block) -> dict[str, Any]:
    default = variable.body.get("default")
    return dict(default) if isinstance(default, dict) else {}


def check_checkov_skips_justified(root: Path) -> list[str]:
    problems = []
    for path in tf_files(root):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for match in SKIP_COMMENT.finditer(line):
                check_id, reason = match.group(1), (match.group(2) or "").strip()
                if not check_id:
                    problems.append(f"{path.name}:{number}: a checkov skip names no check")
                elif len(reason) < 30:
                    problems.append(f"{path.name}:{number}: skip of {check_id} is not justified")
    return problems


ALL_CHECKS: list[Callable[[Path], list[str]]] = [
    check_variables_typed_and_described,
    check_variables_validated,
    check_outputs_described,
    check_iam_least_privilege,
    check_model_registry_read_only,
    check_imdsv2_required,
    check_volumes_encrypted,
    check_bucket_private,
    check_broker_encrypted,
    check_secrets_read_are_connection_secrets,
    check_memorydb_store,
    check_rabbitmq_broker,
    check_secrets_stay_secret,
    check_security_groups,
    check_tags_merged,
    check_example_per_region,
    check_checkov_skips_justified,
]


def all_problems(root: Path) -> list[str]:
    return [problem for check in ALL_CHECKS for problem in check(root)]
