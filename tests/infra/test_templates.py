"""The user data and fleet.toml templates render to what the instances and dispatchers expect."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import terraform_checks as checks
from hcl_template import TemplateError, render

from animfleet.topology import Topology

USER_DATA = checks.TERRAFORM / checks.MODULE / "templates" / "user_data.sh.tftpl"
FLEET_TOML = checks.TERRAFORM / checks.EXAMPLE / "templates" / "fleet.toml.tftpl"

USER_DATA_VARIABLES: dict[str, Any] = {
    "fleet_region": "eu-west",
    "aws_region": "eu-west-1",
    "package_spec": "animfleet==0.1.0",
    "pip_index_url": "",
    "python_version": "3.11",
    "uv_version": "0.8.0",
    "fleet_parameter": "/animfleet/fleet.toml",
    "brokers_parameter": "/animfleet/brokers.json",
    "environment": {"ANIMFLEET_LOG_LEVEL": "info"},
    "gateway_port": 8000,
    "stop_timeout": 960,
    "model_bucket": "models-eu-west-1",
    "model_prefix": "student/v1/",
    "worker_group_name": "animfleet-eu-west-worker",
    "drain_hook_name": "drain-running-jobs",
    "model_cache": "/var/cache/animfleet/models",
    "worker_models": "",
    "worker_cell": "",
    "deployments_json": "",
    "deployments_sha256": "0" * 64,
}


def user_data(processes: list[str], broker_scope: str, **overrides: Any) -> str:
    variables = {
        **USER_DATA_VARIABLES,
        "processes": processes,
        "broker_scope": broker_scope,
        **overrides,
    }
    return render(USER_DATA.read_text(), variables)


def test_the_renderer_strips_like_terraform() -> None:
    # Expected outputs produced by Terraform 1.11's templatefile().
    template = (
        "X%{ if true ~}   \n  \n Y%{ endif }|P \n \n  %{~ if true }Q%{ endif }"
        "|S%{ for x in xs ~}\t \n\t${x}%{ endfor }"
    )
    assert render(template, {"xs": ["a"]}) == "X  \n Y|P \n \nQ|S\ta"
    with pytest.raises(TemplateError):
        render("${upper(x)}", {"x": "a"})


@pytest.mark.parametrize(
    ("processes", "scope"),
    [(["worker"], "home"), (["web", "webhooks"], "all"), (["router"], "all")],
)
def test_user_data_is_valid_bash(processes: list[str], scope: str, tmp_path: Path) -> None:
    script = tmp_path / "user_data.sh"
    script.write_text(user_data(processes, scope))

    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr


def test_worker_user_data_runs_one_worker_per_gpu_for_its_region() -> None:
    script = user_data(["worker"], "home")

    assert "ExecStart=/opt/animfleet/venv/bin/animfleet worker --region eu-west\n" in script
    assert "Environment=CUDA_VISIBLE_DEVICES=%i\n" in script
    assert 'systemctl enable --now "animfleet-worker@$gpu.service"' in script
    assert "nvidia-smi --list-gpus" in script
    # Warm shutdown: SIGTERM to the Celery main process only, for as long as a job may run.
    assert "KillMode=mixed\n" in script
    assert "TimeoutStopSec=960\n" in script
    assert "drain-on-terminate animfleet-eu-west-worker drain-running-jobs eu-west-1" in script
    assert (
        "fetch-config.py /animfleet/fleet.toml /animfleet/brokers.json eu-west-1 home eu-west"
        in script
    )
    assert "s3://models-eu-west-1/student/v1/" in script
    assert "animfleet web" not in script and "animfleet router" not in script


def test_cpu_user_data_runs_the_services() -> None:
    services = user_data(["web", "webhooks", "scheduler", "sweeper"], "all")
    router = user_data(["router"], "all")

    assert "ExecStart=/opt/animfleet/venv/bin/animfleet web --region eu-west\n" in services
    assert "ExecStart=/opt/animfleet/venv/bin/animfleet webhooks --region eu-west\n" in services
    assert "ExecStart=/opt/animfleet/venv/bin/animfleet sweeper --region eu-west\n" in services
    assert "systemctl enable --now animfleet-sweeper.service" in services
    assert "ExecStart=/opt/animfleet/venv/bin/animfleet router\n" in router
    assert "animfleet worker" not in services + router
    assert " all eu-west\n" in services


def test_user_data_sets_the_fleet_file_and_builds_tls_broker_urls() -> None:
    script = user_data(["worker"], "home")

    assert "ANIMFLEET_FLEET_FILE=/etc/animfleet/fleet.toml\n" in script
    assert "ANIMFLEET_LOG_LEVEL=info\n" in script
    assert "EnvironmentFile=/etc/animfleet/broker.env" in script
    # The connection secret's variables, as they are, and nothing but connection variables.
    assert 'lines.append(name + "=" + url + "\\n")' in script
    assert '"^ANIMFLEET_REGION_[A-Z0-9_]+_(BROKER|STORE)_URL$"' in script
    assert 'write("/etc/animfleet/broker.env", "".join(lines), 0o600)' in script


def test_a_cell_worker_knows_its_cell() -> None:
    assert "ANIMFLEET_WORKER_CELL=eu-west-c2\n" in user_data(
        ["worker"], "home", worker_cell="eu-west-c2"
    )
    assert "ANIMFLEET_WORKER_CELL" not in user_data(["worker"], "home")


def test_fetch_config_script_compiles() -> None:
    script = user_data(["worker"], "home")
    python = re.search(r"<<'PY'\n(.*?)\nPY\n", script, re.DOTALL)
    assert python is not None
    compile(python.group(1), "fetch-config.py", "exec")


def rendered_fleet_toml() -> str:
    regions = {
        name: {
            "broker_url": f"rediss://master.{name}.abc123.cache.amazonaws.com:6379/0?ssl_cert_reqs=required",
            "latency_ms": latency,
            "bucket": f"animfleet-{name}-20250101",
            "output_prefix": "outputs/",
            "bucket_region": aws_region,
            "store_url": "",
            "cells": {},
        }
        for name, aws_region, latency in [
            ("us-east", "us-east-1", "ap-south = 190, eu-west = 80"),
            ("eu-west", "eu-west-1", "ap-south = 120"),
            ("ap-south", "ap-south-1", ""),
        ]
    }
    return render(FLEET_TOML.read_text(), {"regions": regions})


def test_fleet_toml_is_a_topology_the_dispatcher_loads() -> None:
    topology = Topology.from_mapping(tomllib.loads(rendered_fleet_toml()), env={})

    assert sorted(topology.names) == ["ap-south", "eu-west", "us-east"]
    assert topology.by_distance("us-east") == ["us-east", "eu-west", "ap-south"]
    assert topology.latency("ap-south", "eu-west") == 120
    storage = topology.region("eu-west").storage
    assert (storage.backend, storage.bucket, storage.prefix, storage.region_name) == (
        "s3",
        "animfleet-eu-west-20250101",
        "outputs/",
        "eu-west-1",
    )


def test_fleet_toml_holds_no_credentials_and_the_environment_supplies_them() -> None:
    data = tomllib.loads(rendered_fleet_toml())
    url = "rediss://:token@master.eu-west.abc123.cache.amazonaws.com:6379/0?ssl_cert_reqs=required"

    topology = Topology.from_mapping(data, env={"ANIMFLEET_REGION_EU_WEST_BROKER_URL": url})

    for region in data["regions"].values():
        assert region["broker_url"].startswith("rediss://master.")
        assert "@" not in region["broker_url"]
    assert topology.region("eu-west").broker_url == url


def test_the_example_passes_what_the_fleet_template_reads() -> None:
    template_fields = set(re.findall(r"\$\{region\.(\w+)\}", FLEET_TOML.read_text()))
    fleet_toml = next(
        str(value)
        for local_block in checks.blocks(checks.TERRAFORM / checks.EXAMPLE, "locals")
        for name, value in local_block.body.items()
        if name == "fleet_toml"
    )
    passed = set(re.findall(r"(\w+)\s*=", fleet_toml))

    assert template_fields, "the template reads no region field"
    assert template_fields <= passed


def test_every_procfile_process_runs_in_a_terraform_group() -> None:
    procfile = (checks.REPO / "Procfile").read_text().splitlines()
    wanted = {line.partition(":")[0] for line in procfile if line and not line.startswith("#")}
    compute = (checks.TERRAFORM / checks.MODULE / "compute.tf").read_text()
    groups = re.findall(r"processes\s*=\s*\[([^\]]*)\]", compute)
    deployed = {name for group in groups for name in re.findall(r'"([a-z]+)"', group)}

    assert "sweeper" in wanted  # its own process, not a side task of the webhook sender
    assert wanted <= deployed, f"in the Procfile, run by no instance group: {wanted - deployed}"


def durable_fleet_toml() -> dict[str, Any]:
    """us-east on MemoryDB cells and RabbitMQ; eu-west as before (one Redis for both)."""
    memorydb = "rediss+cluster://clustercfg.animfleet-us-east-{}.abc.memorydb.us-east-1.amazonaws.com:6379?ssl_cert_reqs=required"
    regions = {
        "us-east": {
            "broker_url": "amqps://b-1234.mq.us-east-1.amazonaws.com:5671",
            "store_url": memorydb.format("c1"),
            "cells": {"c1": memorydb.format("c1"), "c2": memorydb.format("c2")},
            "latency_ms": "eu-west = 80",
            "bucket": "animfleet-us-east-20250101",
            "output_prefix": "outputs/",
            "bucket_region": "us-east-1",
        },
        "eu-west": {
            "broker_url": "rediss://master.eu-west.abc123.cache.amazonaws.com:6379/0?ssl_cert_reqs=required",
            "store_url": "",
            "cells": {},
            "latency_ms": "",
            "bucket": "animfleet-eu-west-20250101",
            "output_prefix": "outputs/",
            "bucket_region": "eu-west-1",
        },
    }
    return tomllib.loads(render(FLEET_TOML.read_text(), {"regions": regions}))


def test_fleet_toml_names_the_store_and_the_cells_where_they_differ_from_the_broker() -> None:
    data = durable_fleet_toml()

    us_east, eu_west = data["regions"]["us-east"], data["regions"]["eu-west"]
    assert us_east["broker_url"] == "amqps://b-1234.mq.us-east-1.amazonaws.com:5671"
    assert us_east["store_url"].startswith("rediss+cluster://clustercfg.animfleet-us-east-c1.")
    assert sorted(us_east["cells"]) == ["c1", "c2"]
    assert us_east["cells"]["c2"]["store_url"].startswith(
        "rediss+cluster://clustercfg.animfleet-us-east-c2."
    )
    assert us_east["storage"]["bucket"] == "animfleet-us-east-20250101"
    # One Redis for both: no store_url, no cells, the file as before.
    assert "store_url" not in eu_west and "cells" not in eu_west
    for region in data["regions"].values():
        urls = [region["broker_url"], region.get("store_url", "")]
        urls += [cell["store_url"] for cell in region.get("cells", {}).values()]
        assert not any("@" in url for url in urls)


def test_the_dispatcher_loads_a_fleet_toml_with_a_store_of_its_own() -> None:
    data = durable_fleet_toml()
    del data["regions"]["us-east"]["cells"]  # see the next test
    store = "rediss+cluster://app:pw@clustercfg.c1.memorydb:6379"

    topology = Topology.from_mapping(data, env={"ANIMFLEET_REGION_US_EAST_STORE_URL": store})

    us_east, eu_west = topology.region("us-east"), topology.region("eu-west")
    assert us_east.broker_url == "amqps://b-1234.mq.us-east-1.amazonaws.com:5671"
    assert us_east.store == store  # the instance's environment overrides the file
    assert eu_west.store == eu_west.broker_url  # no store_url: the broker's Redis


def test_the_dispatcher_loads_a_fleet_toml_with_cells() -> None:
    topology = Topology.from_mapping(durable_fleet_toml(), env={})

    cells = topology.cells_of("us-east")
    assert cells == ["us-east-c1", "us-east-c2"]
    stores = {topology.region(cell).store for cell in cells}
    assert len(stores) == 2  # each cell its own store
