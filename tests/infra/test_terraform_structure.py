"""The Terraform parses, is canonically formatted, and passes the structural checks."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import terraform_checks as checks
from conftest import TerraformTools

TF_FILES = checks.tf_files(checks.TERRAFORM)


def test_the_tree_has_the_module_and_the_example() -> None:
    names = {path.relative_to(checks.TERRAFORM).as_posix() for path in TF_FILES}
    for layout in ("main.tf", "variables.tf", "outputs.tf", "versions.tf"):
        assert f"modules/region_fleet/{layout}" in names
    for layout in ("main.tf", "variables.tf", "outputs.tf", "versions.tf"):
        assert f"examples/multi_region/{layout}" in names


@pytest.mark.parametrize(
    "path", TF_FILES, ids=[p.relative_to(checks.TERRAFORM).as_posix() for p in TF_FILES]
)
def test_every_tf_file_parses(path: Path) -> None:
    parsed = checks.parse(path)
    assert parsed, f"{path} parsed to nothing"


def test_formatting_is_canonical(terraform_tools: TerraformTools) -> None:
    result = subprocess.run(
        ["node", str(terraform_tools.hclfmt), "--check", str(checks.TERRAFORM)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (
        "not canonically formatted (fix: node infra/terraform/tools/hclfmt.js --write "
        f"infra/terraform):\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize("check", checks.ALL_CHECKS, ids=lambda check: check.__name__)
def test_structural_check_passes(check: Callable[[Path], list[str]]) -> None:
    assert check(checks.TERRAFORM) == []


def test_the_formatter_flags_a_misaligned_file(
    terraform_tools: TerraformTools, tmp_path: Path
) -> None:
    source = (checks.TERRAFORM / checks.MODULE / "outputs.tf").read_text()
    misaligned = source.replace("  value       = var.fleet_region", "  value = var.fleet_region")
    assert misaligned != source
    (tmp_path / "outputs.tf").write_text(misaligned)

    result = subprocess.run(
        ["node", str(terraform_tools.hclfmt), "--check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 1
    assert "outputs.tf" in result.stdout


def test_install_is_quick_when_already_installed(terraform_tools: TerraformTools) -> None:
    result = subprocess.run(
        ["bash", str(checks.TERRAFORM / "tools" / "install.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"checkov={terraform_tools.checkov}" in result.stdout
    assert "installing" not in result.stderr
