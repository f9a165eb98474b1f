"""The offline tools' commands: registered in ``animfleet`` by name, and only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from launcher.command import build_parser
from tools.sim.cli import POLICY_NAMES

ROOT = Path(__file__).resolve().parents[2]


def test_the_simulator_policy_names_match_its_policies() -> None:
    from tools.sim.policies import POLICIES

    assert tuple(POLICIES) == POLICY_NAMES


def test_the_offline_commands_are_part_of_animfleet() -> None:
    help_text = build_parser().format_help()
    for command in ("model", "train", "eval", "simulate", "plan", "demo"):
        assert command in help_text


def _modules_after(argv: list[str]) -> set[str]:
    """The modules loaded once ``animfleet <argv>`` has built its parser."""
    probe = (
        "import json, sys\n"
        "from launcher.command import parser_for\n"
        f"parser_for({argv!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout))


def test_an_offline_command_loads_the_tools_commands() -> None:
    assert "tools.offline_commands" in _modules_after(["simulate", "spike"])
    assert "tools.offline_commands" in _modules_after(["--help"])
