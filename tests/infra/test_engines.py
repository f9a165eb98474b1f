"""The store, broker and cell choices of modules/region_fleet, run by Terraform itself.

Every combination (ElastiCache or MemoryDB store, Redis or RabbitMQ broker, one or more cells) is
planned and applied by ``terraform test`` against the mocked AWS provider
(tests/infra/terraform/engines.tftest.hcl): the resources each creates, the URLs in the connection
secret, the outputs, and the validations that refuse a bad choice. Offline, that needs the
terraform binary and an AWS provider in a local mirror (``ANIMFLEET_TF_PROVIDER_MIRROR``, default
/opt/tf-plugins). The mirror here holds the 5.x provider, while the module needs >= 6.0 for its
per-resource ``region`` argument, so the test runs a copy without that argument (everything runs in
the provider's region) and with ``random_password`` stood in by ``terraform_data`` (the random
provider is not mirrored): the rest of the module is validated against the real provider schema.

The MemoryDB user's access string is checked on a real redis-server: what the region store does
is allowed, everything else is refused.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import terraform_checks as checks

from launcher.local_servers import free_port, redis_argv, wait_for

TERRAFORM = shutil.which("terraform")
MIRROR = Path(os.environ.get("ANIMFLEET_TF_PROVIDER_MIRROR", "/opt/tf-plugins"))
AWS_PROVIDER = MIRROR / "registry.terraform.io" / "hashicorp" / "aws"
TESTS = Path(__file__).parent / "terraform"
STAND_IN_PASSWORD = "password0123456789"  # what engines.tftest.hcl expects in the URLs


def mirrored_aws_version() -> str | None:
    versions = sorted(p.name for p in AWS_PROVIDER.glob("*") if p.is_dir())
    return versions[-1] if versions else None


needs_terraform = pytest.mark.skipif(
    TERRAFORM is None or mirrored_aws_version() is None,
    reason="needs the terraform binary and an AWS provider in a local mirror",
)


def offline_copy(root: Path, aws_version: str) -> Path:
    """The module as the mirrored provider and no random provider can run it."""
    module = root / "region_fleet"
    shutil.copytree(checks.TERRAFORM / checks.MODULE, module)
    for path in module.glob("*.tf"):
        text = path.read_text()
        text = re.sub(r"(?m)^\s*region\s*=\s*var\.aws_region\s*\n", "", text)
        text = re.sub(
            r'resource "random_password" "(\w+)" \{',
            rf'resource "terraform_data" "\1" {{\n  input = "{STAND_IN_PASSWORD}"',
            text,
        )
        text = re.sub(r"(?m)^\s*(length|special)\s*=.*\n", "", text)
        text = re.sub(
            r"random_password\.(\w+)((?:\[[^\]]*\])?)\.result", r"terraform_data.\1\2.output", text
        )
        path.write_text(text)
    (module / "versions.tf").write_text(
        'terraform {\n  required_providers {\n    aws = {\n      source  = "hashicorp/aws"\n'
        f'      version = "{aws_version}"\n    }}\n  }}\n}}\n'
    )
    (module / "tests").mkdir()
    shutil.copy(TESTS / "engines.tftest.hcl", module / "tests")
    return module


@needs_terraform
def test_every_engine_and_cell_combination_plans_and_applies(tmp_path: Path) -> None:
    version = mirrored_aws_version()
    assert version is not None
    module = offline_copy(tmp_path, version)
    config = tmp_path / "terraformrc"
    config.write_text(
        "provider_installation {\n"
        f'  filesystem_mirror {{\n    path    = "{MIRROR}"\n'
        '    include = ["registry.terraform.io/hashicorp/aws"]\n  }\n'
        '  direct {\n    exclude = ["registry.terraform.io/hashicorp/aws"]\n  }\n}\n'
    )
    env = {**os.environ, "TF_CLI_CONFIG_FILE": str(config), "TF_IN_AUTOMATION": "1"}

    def terraform(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TERRAFORM or "terraform", *args, "-no-color"],
            cwd=module,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    init = terraform("init", "-input=false", "-backend=false")
    assert init.returncode == 0, init.stdout + init.stderr
    validate = terraform("validate")
    assert validate.returncode == 0, validate.stdout + validate.stderr

    (module / "required.tfvars").write_text(checks.MODULE_TFVARS)
    result = terraform("test", "-var-file=required.tfvars")

    runs = re.findall(r'run "(\w+)"\.\.\. (\w+)', result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(runs) == 7 and all(outcome == "pass" for _, outcome in runs), runs


################################################################################
# The MemoryDB user's access string, on a real Redis
################################################################################


def access_string() -> str:
    for block in checks.blocks(checks.TERRAFORM / checks.MODULE, "locals"):
        if "store_access_string" in block.body:
            return str(block.body["store_access_string"])
    raise AssertionError("no local store_access_string")


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """A private redis-server with the access string's user: (that user, the admin)."""
    port = free_port()
    process = subprocess.Popen(redis_argv(port, tmp_path, persistence=False, databases=1))
    try:
        admin = redis.Redis(port=port)
        wait_for(admin.ping, "redis-server", 30, process)
        rules = access_string().split()
        # Redis 7 (MemoryDB's engine) starts a user without channels; this 6.2 server needs telling.
        reset = ("reset", "resetchannels", ">app-password")
        admin.execute_command("ACL", "SETUSER", "app", *reset, *rules)  # type: ignore[no-untyped-call]
        yield redis.Redis(port=port, username="app", password="app-password"), admin
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_access_string_is_least_privilege() -> None:
    rules = access_string().split()
    assert rules[0] == "on"
    assert "-@all" in rules and "+@all" not in rules and "allkeys" not in rules
    assert "~*" not in rules and "&*" not in rules and "allchannels" not in rules
    # Everything added before -@dangerous loses the dangerous commands; only INFO comes back.
    after = rules[rules.index("-@dangerous") + 1 :]
    assert "+info" in after and not any(rule.startswith("+@") for rule in after)
    assert "+@scripting" not in rules  # SCRIPT FLUSH/KILL and FUNCTION stay out


def test_the_store_user_may_do_what_the_store_does(
    acl_redis: tuple[redis.Redis, redis.Redis],
) -> None:
    app, _ = acl_redis
    for key in ("animfleet:job:1", "{animfleet:us-east-c1}:job:1", "animfleet:{us-east}:job:1"):
        app.set(key, "record")
        assert app.get(key) == b"record"
    with app.pipeline(transaction=True) as pipe:
        pipe.zadd("animfleet:queued:us-east", {"job-1": 1.0})
        pipe.hset("animfleet:h", "a", "1")
        assert pipe.execute() == [1, 1]
    script = app.register_script("return redis.call('GET', KEYS[1])")
    assert script(keys=["animfleet:job:1"]) == b"record"
    assert app.script_exists(script.sha) == [True]
    assert app.eval("return redis.call('INCR', KEYS[1])", 1, "animfleet:n") == 1
    subscriber = app.pubsub()  # type: ignore[no-untyped-call]
    subscriber.subscribe("animfleet:prefetch:us-east")
    assert app.publish("animfleet:prefetch:us-east", "load") == 1
    assert int(app.info("server")["uptime_in_seconds"]) >= 0
    subscriber.close()


@pytest.mark.parametrize(
    "command",
    [
        ("SET", "other:1", "x"),
        ("GET", "session:1"),
        ("PUBLISH", "other-channel", "x"),
        ("KEYS", "animfleet:*"),
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("CONFIG", "GET", "maxmemory"),
        ("SCRIPT", "FLUSH"),
        ("DEBUG", "SLEEP", "0"),
        ("MONITOR",),
        ("SHUTDOWN",),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_the_store_user_may_do_nothing_else(
    acl_redis: tuple[redis.Redis, redis.Redis], command: tuple[str, ...]
) -> None:
    app, admin = acl_redis
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.execute_command(*command)  # type: ignore[no-untyped-call]
    assert admin.ping()  # SHUTDOWN and the like were refused, not obeyed
