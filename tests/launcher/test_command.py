"""The ``animfleet`` command line: a fast --help, the version, one-line errors for user mistakes."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from launcher import command, command_errors
from tools import EXAMPLE_IMAGE

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "matplotlib", "numpy", "diffusers", "celery", "dispatcher", "tools.sim.engine")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANIMFLEET_")}
    env["PYTHONPATH"] = str(ROOT)  # the tree under test, whatever is installed
    return env


def animfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("animfleet: error: "), lines[0]
    return lines[0]


def test_help_is_fast_and_lists_the_commands() -> None:
    began = time.perf_counter()
    result = animfleet("--help")
    elapsed = time.perf_counter() - began
    assert result.returncode == 0, result.stderr
    for name in ("worker", "sweeper", "submit", "get", "cancel", "train", "simulate", "plan"):
        assert name in result.stdout
    # Under 0.1 s on an idle machine; the margin is for a loaded one.
    assert elapsed < 2.0, f"animfleet --help took {elapsed:.2f} s"


def test_building_the_parser_imports_nothing_heavy() -> None:
    probe = (
        "import json, sys\n"
        "from launcher.command import build_parser\n"
        "build_parser().format_help()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(result.stdout))
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not heavy, f"building the parser imported {heavy}"


def test_version_is_the_installed_one() -> None:
    result = animfleet("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"animfleet {version('animfleet')}"


def test_a_missing_fleet_file_is_one_line() -> None:
    result = animfleet("--fleet", "/nonexistent/fleet.toml", "get", "local.0123abcd")
    line = _one_error_line(result)
    assert "fleet file not found: /nonexistent/fleet.toml" in line
    assert result.returncode == command_errors.EX_USAGE


def test_an_invalid_fleet_file_is_one_line(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text("[regions.local\n")
    result = animfleet("--fleet", str(fleet), "cancel", "local.0123abcd")
    assert "invalid fleet file" in _one_error_line(result)
    assert result.returncode == command_errors.EX_USAGE


def test_an_unknown_region_is_one_line_naming_it() -> None:
    image = str(EXAMPLE_IMAGE)
    for args in (
        ("submit", "--region", "mars", image, "pan"),
        ("worker", "--region", "mars"),
        ("sweeper", "--region", "mars"),
    ):
        result = animfleet(*args)
        line = _one_error_line(result)
        assert "unknown region 'mars'" in line
        assert result.returncode == command_errors.EX_USAGE


def test_a_missing_image_is_one_line() -> None:
    result = animfleet("submit", "/nonexistent.png", "pan")
    assert "image not found: /nonexistent.png" in _one_error_line(result)
    assert result.returncode == command_errors.EX_USAGE


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _subparsers(child)
    return found


def test_every_help_shows_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # Wide enough that no line wraps: argparse breaks long defaults (paths) at their hyphens.
    monkeypatch.setenv("COLUMNS", "1000")
    for parser in _subparsers(command.build_parser()):
        text = parser.format_help()
        for action in parser._actions:
            if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
                continue
            assert action.help, f"{parser.prog} {action.option_strings[0]} has no help"
            assert f"(default: {action.default})" in " ".join(text.split()), (
                f"{parser.prog} {action.option_strings[0]}"
            )


class _FakeClient:
    """Stands in for ``dispatcher.Client``: no broker needed to check the wiring."""

    outcome: Any = None

    def __init__(self, topology: object) -> None:
        self.topology = topology

    def close(self) -> None:
        pass

    def _answer(self) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def cancel(self, job_id: str) -> Any:
        return self._answer()

    def get(self, job_id: str) -> Any:
        return self._answer()

    def submit(self, *args: object, **kwargs: object) -> Any:
        return self._answer()


class _FakeTenancy:
    """Stands in for ``dispatcher.tenancy.Tenancy``: submit lists its job under the tenant."""

    def __init__(self, client: _FakeClient, region: str) -> None:
        pass

    def index(self, record: object) -> None:
        pass


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch) -> type[_FakeClient]:
    import dispatcher
    import dispatcher.tenancy

    monkeypatch.delenv("ANIMFLEET_FLEET_FILE", raising=False)
    monkeypatch.setattr(dispatcher, "Client", _FakeClient)
    monkeypatch.setattr(dispatcher.tenancy, "Tenancy", _FakeTenancy)
    monkeypatch.setattr(_FakeClient, "outcome", None)
    return _FakeClient


def test_cancel_prints_the_resulting_status(
    fake_client: type[_FakeClient], capsys: pytest.CaptureFixture[str]
) -> None:
    from animfleet.jobs import JobState

    fake_client.outcome = SimpleNamespace(status=JobState.CANCELED)
    assert command.main(["cancel", "local.0123abcd"]) == 0
    assert capsys.readouterr().out.strip() == "canceled"


def test_known_failures_are_one_line_with_their_exit_codes(
    fake_client: type[_FakeClient], capsys: pytest.CaptureFixture[str]
) -> None:
    from animfleet.region.jobstore import JobNotFound
    from dispatcher.admission import AtCapacity
    from dispatcher.inputs import InvalidInput

    cases = [
        (["get", "local.0123abcd"], JobNotFound("local.0123abcd"), 1, "local.0123abcd"),
        (["cancel", "local.0123abcd"], JobNotFound("local.0123abcd"), 1, "not found"),
        (
            ["submit", str(EXAMPLE_IMAGE), "pan"],
            InvalidInput("frames", "must be at most 32"),
            command_errors.EX_USAGE,
            "frames",
        ),
        (
            ["submit", str(EXAMPLE_IMAGE), "pan"],
            AtCapacity("local", 7, 2.4),
            command_errors.EX_TEMPFAIL,
            "retry after 3 s",
        ),
    ]
    for argv, error, code, needle in cases:
        fake_client.outcome = error
        assert command.main(argv) == code
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("animfleet: error: "), lines
        assert needle in lines[0]


def test_unexpected_errors_keep_their_traceback(fake_client: type[_FakeClient]) -> None:
    fake_client.outcome = RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        command.main(["get", "local.0123abcd"])


@pytest.mark.parametrize(
    ("process", "variable", "value"),
    [
        ("worker", "ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S", "nine"),
        ("sweeper", "ANIMFLEET_SWEEPER_ORPHAN_AFTER_S", "-1"),  # before it touches Redis
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable_and_value(
    process: str, variable: str, value: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "launcher", process, "--region", "local"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, variable: value},
    )
    assert result.returncode == 78
    (line,) = result.stderr.strip().splitlines()
    assert f"{variable}={value!r}" in line


def test_submit_leaves_the_size_to_the_api_unless_given(
    fake_client: type[_FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, object]] = []

    def submit(self: _FakeClient, *args: object, **kwargs: object) -> Any:
        sent.append(kwargs)
        return SimpleNamespace(id="local.0123abcd")

    monkeypatch.setattr(fake_client, "submit", submit)
    assert command.main(["submit", str(EXAMPLE_IMAGE), "pan"]) == 0
    assert command.main(["submit", str(EXAMPLE_IMAGE), "pan", "--size", "128"]) == 0
    assert "width" not in sent[0] and "height" not in sent[0]
    assert (sent[1]["width"], sent[1]["height"]) == (128, 128)


def _procfile_commands() -> list[list[str]]:
    """The Procfile's command lines, its variables given values; and what the Terraform
    services instances run besides (``deploy apply``)."""
    found = [["deploy", "apply", "--region", "local", "deployments.json"]]
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            command = line.partition(":")[2].replace("${REGION}", "local")
            argv = shlex.split(command.replace("${PORT:-8000}", "8000"))
            assert argv[0] == "animfleet", line
            found.append(argv[1:])
    return found


def test_the_fleets_processes_parse_without_loading_tools() -> None:
    probe = (
        "import json, sys\n"
        "from launcher.command import parser_for\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    parser_for(argv).parse_args(argv)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    commands = _procfile_commands()
    assert {argv[0] for argv in commands} >= {"worker", "web", "webhooks", "router", "sweeper"}
    result = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(commands)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert not [m for m in loaded if m == "tools" or m.startswith("tools.")]


def test_without_tools_the_launchers_own_commands_remain() -> None:
    # An install without the offline tools: ``import tools`` fails as a missing module does.
    probe = (
        "import sys\n"
        "sys.modules['tools'] = None\n"
        "from launcher.command import build_parser\n"
        "print(build_parser().format_help())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "worker" in result.stdout and "local" in result.stdout
    assert "simulate" not in result.stdout and "train" not in result.stdout
