"""The two distributions, built as wheels from a copy of the checkout: the SDK's
(``sdk-python/``) holds ``animfleet_sdk`` and ``animfleet_api`` alone and no console script, so a
web backend that installs it gets no ``tools`` or ``storage`` beside its own modules; the
fleet's (the root) holds the fleet's packages and the ``animfleet`` command, never ``tools`` nor
``benchmarks``."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
FLEET_PACKAGES = {
    "animfleet",
    "animfleet_api",
    "animfleet_sdk",
    "dispatcher",
    "launcher",
    "storage",
    "workers",
}


def _tracked_copy(into: Path) -> Path:
    """The checkout's files, as git sees them (the build writes ``build/`` and egg-info where it
    runs)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not name.startswith(("tests/", "docs/", "infra/", "models/")):
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def _wheel(project: Path, out: Path) -> Path:
    built = subprocess.run(
        [*PIP_WHEEL, "-w", str(out), str(project)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def _contents(wheel: Path) -> tuple[set[str], dict[str, str]]:
    """The wheel's top-level names (``.dist-info`` aside) and its console scripts."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        scripts: dict[str, str] = {}
        for name in names:
            if name.endswith(".dist-info/entry_points.txt"):
                parser = configparser.ConfigParser()
                parser.read_string(archive.read(name).decode())
                if parser.has_section("console_scripts"):
                    scripts = dict(parser["console_scripts"])
    tops = {name.split("/")[0] for name in names}
    return {top for top in tops if not top.endswith(".dist-info")}, scripts


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tracked_copy(tmp_path_factory.mktemp("checkout"))


def test_the_sdk_wheel_holds_the_sdk_alone(checkout: Path, tmp_path: Path) -> None:
    tops, scripts = _contents(_wheel(checkout / "sdk-python", tmp_path))
    print("animfleet-sdk wheel:", sorted(tops), "scripts:", scripts)
    assert tops == {"animfleet_sdk", "animfleet_api"}
    assert scripts == {}


def test_the_fleet_wheel_never_holds_tools_or_benchmarks(checkout: Path, tmp_path: Path) -> None:
    tops, scripts = _contents(_wheel(checkout, tmp_path))
    print("animfleet wheel:", sorted(tops), "scripts:", scripts)
    assert tops == FLEET_PACKAGES
    assert scripts == {"animfleet": "launcher.command:main"}
