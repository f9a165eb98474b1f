"""Model versions in the Terraform (issue 20): the versions and deployments are inputs, workers
preload and cache them, the services apply the deployments once per change, a version may get a
worker group of its own, and only the operator writes the registry."""

from __future__ import annotations

import json
import re
import runpy
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import terraform_checks as checks
from test_templates import user_data

from animfleet.versions import NAME, VERSION_REF

MODULE = checks.TERRAFORM / checks.MODULE
EXAMPLE = checks.TERRAFORM / checks.EXAMPLE

DEPLOYMENTS_JSON = json.dumps(
    {"default": {"versions": {"small@1": 90, "small@2": 10}, "stable": "small@1"}},
    separators=(",", ":"),
)
SHA = "ab" * 32


def variable(name: str, root: Path = MODULE) -> dict[str, Any]:
    return next(v.body for v in checks.blocks(root, "variable") if v.name == name)


def resource(type_: str, name: str) -> dict[str, Any]:
    return next(
        r.body for r in checks.blocks(MODULE, "resource") if (r.type, r.name) == (type_, name)
    )


def policy_document(name: str) -> dict[str, Any]:
    return next(
        d.body
        for d in checks.blocks(MODULE, "data")
        if (d.type, d.name) == ("aws_iam_policy_document", name)
    )


def local_values(root: Path = MODULE) -> dict[str, str]:
    return {
        name: str(value)
        for block in checks.blocks(root, "locals")
        for name, value in block.body.items()
    }


################################################################################
# Inputs
################################################################################


def test_the_new_variables_are_typed_described_and_validated() -> None:
    for name in ("model_versions", "deployments", "version_worker_groups"):
        body = variable(name)
        assert str(body.get("description", "")).strip(), name
        assert str(body.get("type", "")).strip(), name
        assert body.get("validation"), f"{name} has no validation"
        assert body.get("default") in ([], {}), f"{name} must default to nothing"
    assert "list(string)" in str(variable("model_versions")["type"])


def test_model_versions_are_validated_like_the_python_side() -> None:
    conditions = str(variable("model_versions")["validation"])
    pattern = f"^{NAME}@{NAME}$"
    assert pattern == VERSION_REF.pattern
    assert pattern.replace("\\", "\\\\") in conditions or pattern in conditions


def test_model_artifacts_says_how_it_relates_to_the_versions() -> None:
    description = variable("model_artifacts")["description"]
    assert "ANIMFLEET_MODEL_DIR" in description and "model_versions" in description


def test_the_example_passes_the_versions_through() -> None:
    fleet = next(
        m.body
        for m in checks.blocks(EXAMPLE, "module")
        if m.body.get("source") == "../../modules/region_fleet"
    )
    assert fleet["model_versions"] == "${var.model_versions}"
    assert fleet["deployments"] == "${var.deployments}"
    assert "var.version_worker_groups" in fleet["version_worker_groups"]
    for name in ("model_versions", "deployments", "version_worker_groups"):
        assert variable(name, EXAMPLE)["description"]
    example = (EXAMPLE / "terraform.tfvars.example").read_text()
    assert "model_versions" in example and "deployments" in example


################################################################################
# Worker groups
################################################################################


def test_worker_groups_are_one_resource_with_for_each() -> None:
    groups = resource("aws_autoscaling_group", "worker")
    assert groups["for_each"] == "${local.worker_groups}"
    assert groups["min_size"] == "${each.value.min_size}"
    assert groups["max_size"] == "${each.value.max_size}"
    launch = checks.first(groups, "launch_template")
    assert launch["id"] == "${aws_launch_template.this[each.key].id}"

    values = local_values()
    assert "var.version_worker_groups" in values["worker_groups"]
    assert "local.worker_groups" in values["launch_groups"]
    # The shared group keeps its address (state moves, no replacement) and its scaling.
    moved = [
        (block.get("from"), block.get("to"))
        for path in checks.tf_files(MODULE)
        for block in checks.parse(path).get("moved", [])
    ]
    assert ("${aws_autoscaling_group.worker}", '${aws_autoscaling_group.worker["worker"]}') in moved
    scaling = (MODULE / "scaling.tf").read_text()
    assert "aws_autoscaling_group.worker.name" not in scaling
    assert "for_each = local.scaled_worker_groups" in scaling  # the shared group(s) only
    assert "aws_autoscaling_group.worker[each.key].name" in scaling


def test_only_the_shared_group_preloads_versions_without_a_group_of_their_own() -> None:
    groups = local_values()["worker_groups"]
    assert "!contains(keys(var.version_worker_groups), ref)" in groups
    assert "[ref]" in groups  # a dedicated group preloads its version only
    template = resource("aws_launch_template", "this")["user_data"]
    assert "each.value.worker_models" in template
    assert "each.value.deployments_json" in template


def test_every_worker_group_drains_with_its_own_name() -> None:
    template = resource("aws_launch_template", "this")["user_data"]
    assert re.search(r'worker_group_name\s*=\s*"\$\{local\.name\}-\$\{each\.key\}"', template)
    drain = next(
        statement
        for statement in policy_document("worker")["statement"]
        if statement.get("sid") == "DrainOnScaleIn"
    )
    assert drain["resources"] == "${[for group in aws_autoscaling_group.worker : group.arn]}"


################################################################################
# Registry access
################################################################################


def test_the_registry_is_under_the_storage_prefix_that_fleet_toml_gives() -> None:
    values = local_values()
    assert values["model_registry_prefix"] == "${var.output_prefix}models/"
    assert values["model_registry_arn"] == "${local.bucket_arn}/${local.model_registry_prefix}*"
    fleet_toml = (EXAMPLE / "templates" / "fleet.toml.tftpl").read_text()
    assert 'prefix = "${region.output_prefix}"' in fleet_toml


def test_workers_read_the_registry_and_nobody_writes_it() -> None:
    worker = policy_document("worker")
    read = next(s for s in worker["statement"] if s.get("sid") == "ReadModelVersions")
    assert read["actions"] == ["s3:GetObject"]
    assert read["resources"] == ["${local.model_registry_arn}"]
    assert checks.check_model_registry_read_only(checks.TERRAFORM) == []
    deny = policy_document("no_model_writes")["statement"][0]
    assert deny["effect"] == "Deny"
    assert {"s3:PutObject", "s3:DeleteObject"} <= set(deny["actions"])
    for role in ("worker", "services"):
        sources = str(policy_document(role)["source_policy_documents"])
        assert "no_model_writes" in sources, role


def test_the_registry_never_expires() -> None:
    lifecycle = resource("aws_s3_bucket_lifecycle_configuration", "outputs")
    prefixes = [
        checks.first(rule, "filter").get("prefix")
        for rule in lifecycle["rule"]
        if rule.get("expiration")
    ]
    assert sorted(str(prefix) for prefix in prefixes) == [
        "${var.output_prefix}outputs/",
        "${var.output_prefix}records/",
    ]


################################################################################
# User data
################################################################################


def test_workers_get_their_versions_and_a_cache_on_disk() -> None:
    script = user_data(["worker"], "home", worker_models="small@1,small@2")

    assert "install -d -o animfleet -g animfleet /var/cache/animfleet/models\n" in script
    env = re.search(r"cat > /etc/animfleet/worker.env <<'ENV'\n(.*?)\nENV\n", script, re.DOTALL)
    assert env is not None
    assert env.group(1).splitlines() == [
        "ANIMFLEET_WORKER_MODEL_CACHE=/var/cache/animfleet/models",
        "ANIMFLEET_WORKER_MODELS=small@1,small@2",
    ]
    unit = script.split("animfleet-worker@.service <<'UNIT'")[1].split("UNIT")[0]
    assert "EnvironmentFile=/etc/animfleet/worker.env\n" in unit
    assert "animfleet deploy" not in script and "animfleet-deploy" not in script


def test_workers_without_versions_serve_their_default_model() -> None:
    script = user_data(["worker"], "home")

    assert "ANIMFLEET_WORKER_MODEL_CACHE=/var/cache/animfleet/models\n" in script
    assert "ANIMFLEET_WORKER_MODELS" not in script


def test_services_apply_the_deployments_once_per_definition(tmp_path: Path) -> None:
    script = user_data(
        ["web", "webhooks", "scheduler"],
        "all",
        deployments_json=DEPLOYMENTS_JSON,
        deployments_sha256=SHA,
    )
    path = f"/etc/animfleet/deployments/{SHA}.json"

    assert f"cat > {path} <<'JSON'\n{DEPLOYMENTS_JSON}\nJSON\n" in script
    assert (
        "ExecStart=/opt/animfleet/venv/bin/python /opt/animfleet/bin/apply-deployments.py "
        f"eu-west {path} {SHA}\n"
    ) in script
    unit = script.split("animfleet-deploy.service <<'UNIT'")[1].split("\nUNIT\n")[0]
    assert "Type=oneshot" in unit and "After=animfleet-config.service" in unit
    assert "EnvironmentFile=/etc/animfleet/broker.env" in unit
    # Started without blocking: a version not pushed yet makes it retry, not fail the boot.
    assert "systemctl start --no-block animfleet-deploy.service" in script
    assert script.index("systemctl enable --now animfleet-web.service") < script.index(
        "systemctl start --no-block animfleet-deploy.service"
    )

    shell = tmp_path / "user_data.sh"
    shell.write_text(script)
    result = subprocess.run(["bash", "-n", str(shell)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_without_deployments_nothing_is_applied() -> None:
    script = user_data(["web", "webhooks", "scheduler"], "all")
    assert "apply-deployments" not in script and "animfleet-deploy" not in script


class FakeBroker:
    def __init__(self, store: dict[str, bytes]) -> None:
        self.store = store

    def get(self, key: str) -> bytes | None:
        return self.store.get(key)

    def set(self, key: str, value: str) -> None:
        self.store[key] = value.encode()


def run_apply_script(
    script: str, store: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> list[list[str]]:
    source = re.search(r"apply-deployments.py <<'PY'\n(.*?)\nPY\n", script, re.DOTALL)
    assert source is not None
    program = tmp_path / "apply-deployments.py"
    program.write_text(source.group(1))
    urls: list[str] = []
    fake_redis = types.ModuleType("redis")

    def from_url(url: str) -> FakeBroker:
        urls.append(url)
        return FakeBroker(store)

    fake_redis.Redis = types.SimpleNamespace(from_url=from_url)  # type: ignore[attr-defined]
    calls: list[list[str]] = []

    def fake_run(command: list[str], check: bool) -> None:
        assert check
        calls.append(command)

    monkeypatch.setitem(sys.modules, "redis", fake_redis)
    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv("ANIMFLEET_REGION_EU_WEST_STORE_URL", "rediss://:t@store:6379/0")
    path = f"/etc/animfleet/deployments/{SHA}.json"
    monkeypatch.setattr(sys, "argv", ["apply-deployments.py", "eu-west", path, SHA])
    try:
        runpy.run_path(str(program), run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (None, 0)
    assert urls == ["rediss://:t@store:6379/0"]
    return calls


def test_the_apply_runs_once_so_a_reboot_keeps_an_automatic_rollback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = user_data(
        ["web", "webhooks", "scheduler"],
        "all",
        deployments_json=DEPLOYMENTS_JSON,
        deployments_sha256=SHA,
    )
    store: dict[str, bytes] = {}

    first = run_apply_script(script, store, monkeypatch, tmp_path)
    again = run_apply_script(script, store, monkeypatch, tmp_path)

    assert first == [
        [
            "/opt/animfleet/venv/bin/animfleet",
            "deploy",
            "apply",
            "--region",
            "eu-west",
            f"/etc/animfleet/deployments/{SHA}.json",
        ]
    ]
    assert again == []  # another instance, or a reboot: the weights stay as they are
    assert store == {"animfleet:deployments-applied:eu-west": SHA.encode()}

    store["animfleet:deployments-applied:eu-west"] = b"an older definition"
    assert len(run_apply_script(script, store, monkeypatch, tmp_path)) == 1


################################################################################
# The validations and the rendered JSON, evaluated by Terraform itself (no provider needed)
################################################################################

TERRAFORM = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(
    TERRAFORM is None, reason="the terraform binary is not installed"
)


GOOD = """
model_versions = ["small@1", "small@2", "big@1"]
deployments = {
  default = {
    versions = { "small@1" = 90, "small@2" = 10 }
    stable   = "small@1"
    rollback = { window_s = 300, max_p95_ratio = 2 }
  }
  big = { versions = { "big@1" = 1 }, stable = "big@1" }
}
version_worker_groups = { "big@1" = { min_size = 1, max_size = 2 } }
"""


def terraform_root(tmp_path: Path) -> Path:
    """The module's variables and its deployments_json local, in a root that needs no provider."""
    shutil.copy(MODULE / "variables.tf", tmp_path / "variables.tf")
    main = (MODULE / "main.tf").read_text()
    local = re.search(r"\n(  deployments_json = .*?\n  }\)\n)", main, re.DOTALL)
    assert local is not None, "deployments_json is not where this test looks for it"
    (tmp_path / "rendered.tf").write_text(
        "locals {\n" + local.group(1) + "}\n\n"
        'output "deployments_json" {\n  value = local.deployments_json\n}\n'
    )
    subprocess.run(
        [TERRAFORM or "terraform", "init", "-input=false", "-no-color"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return tmp_path


def plan(root: Path, tfvars: str) -> subprocess.CompletedProcess[str]:
    (root / "test.tfvars").write_text(checks.MODULE_TFVARS + tfvars)
    return subprocess.run(
        [
            TERRAFORM or "terraform",
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-var-file=test.tfvars",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_terraform
def test_terraform_accepts_a_deployment_and_renders_what_deploy_apply_reads(
    tmp_path: Path,
) -> None:
    root = terraform_root(tmp_path)

    result = plan(root, GOOD)

    assert result.returncode == 0, result.stdout + result.stderr
    rendered = subprocess.run(
        [TERRAFORM or "terraform", "output", "-raw", "deployments_json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(rendered) == {
        "default": {
            "versions": {"small@1": 90, "small@2": 10},
            "stable": "small@1",
            "rollback": {"window_s": 300, "max_p95_ratio": 2},
        },
        # No rollback given: none is sent, so the Python defaults apply.
        "big": {"versions": {"big@1": 1}, "stable": "big@1"},
    }


@needs_terraform
def test_no_deployments_render_nothing(tmp_path: Path) -> None:
    root = terraform_root(tmp_path)

    result = plan(root, "")

    assert result.returncode == 0, result.stdout + result.stderr
    rendered = subprocess.run(
        [TERRAFORM or "terraform", "output", "-json", "deployments_json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(rendered) == ""


BAD_INPUTS = [
    ("bad-version-ref", 'model_versions = ["Small@1"]', "must be `name@version`"),
    ("no-version", 'model_versions = ["small"]', "must be `name@version`"),
    ("listed-twice", 'model_versions = ["small@1", "small@1"]', "must not list a version twice"),
    (
        "negative-weight",
        'model_versions = ["a@1", "a@2"]\n'
        'deployments = { default = { versions = { "a@1" = 1, "a@2" = -1 }, stable = "a@1" } }',
        "weights must be >= 0",
    ),
    (
        "all-zero",
        'model_versions = ["a@1"]\n'
        'deployments = { default = { versions = { "a@1" = 0 }, stable = "a@1" } }',
        "weight above 0",
    ),
    (
        "stable-not-a-version",
        'model_versions = ["a@1", "a@2"]\n'
        'deployments = { default = { versions = { "a@1" = 1 }, stable = "a@2" } }',
        "`stable` version must be one of its `versions`",
    ),
    (
        "version-not-listed",
        'model_versions = ["a@1"]\n'
        'deployments = { default = { versions = { "a@1" = 1, "b@1" = 1 }, stable = "a@1" } }',
        "must be listed in `model_versions`",
    ),
    (
        "bad-deployment-name",
        'model_versions = ["a@1"]\n'
        'deployments = { "Default" = { versions = { "a@1" = 1 }, stable = "a@1" } }',
        "`deployments` names must be",
    ),
    (
        "group-for-an-unlisted-version",
        'model_versions = ["a@1"]\n'
        'version_worker_groups = { "b@1" = { min_size = 0, max_size = 1 } }',
        "key must be listed in `model_versions`",
    ),
    (
        "group-min-above-max",
        'model_versions = ["a@1"]\n'
        'version_worker_groups = { "a@1" = { min_size = 3, max_size = 1 } }',
        "0 <= min_size <= max_size",
    ),
]


@needs_terraform
@pytest.mark.parametrize(
    ("tfvars", "message"), [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS]
)
def test_terraform_refuses(tfvars: str, message: str, tmp_path: Path) -> None:
    root = terraform_root(tmp_path)

    result = plan(root, tfvars)

    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert message in output, output
