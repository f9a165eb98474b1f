"""Fixtures for the Terraform checks: the tools from infra/terraform/tools/install.sh."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# The helpers next to this file (terraform_checks, hcl_template) are imported by name.
sys.path.insert(0, str(Path(__file__).parent))

from terraform_checks import REPO

INSTALL = REPO / "infra" / "terraform" / "tools" / "install.sh"


@dataclass(frozen=True)
class TerraformTools:
    checkov: Path
    hclfmt: Path


@pytest.fixture(scope="session")
def terraform_tools() -> TerraformTools:
    """checkov (own venv) and the HCL formatter, installed into .tools/ on first use.

    Needs the PyPI and npm registries the first time; fails with the installer's output when
    they cannot be reached rather than skipping the checks.
    """
    result = subprocess.run(
        ["bash", str(INSTALL)], capture_output=True, text=True, timeout=900, check=False
    )
    if result.returncode != 0:
        pytest.fail(
            f"{INSTALL} failed (exit {result.returncode}); it needs the PyPI and npm registries "
            f"on first run.\n{result.stdout}\n{result.stderr}",
            pytrace=False,
        )
    paths = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return TerraformTools(
        checkov=Path(paths["checkov"]),
        hclfmt=REPO / "infra" / "terraform" / "tools" / "hclfmt.js",
    )
