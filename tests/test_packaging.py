"""The base install is the HTTP SDK alone (httpx and pydantic), the ``fleet`` extra is what the
Redis-level ``from dispatcher import Client`` needs (no torch), and the lock CI installs from
covers pyproject.toml."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OURS = ("animfleet_api", "animfleet_sdk", "animfleet", "dispatcher", "workers", "storage", "tools")
# What only workers, the gateway or the tools need; PIL does not pull numpy in on import.
HEAVY = (
    "torch",
    "diffusers",
    "transformers",
    "tokenizers",
    "safetensors",
    "numpy",
    "av",
    "fastapi",
    "starlette",
    "uvicorn",
    "boto3",
    "botocore",
    "matplotlib",
    "psutil",
    "workers",
    "storage",
    "tools",
)


def _requirements(group: str | None = None) -> list[Requirement]:
    raw = PROJECT["dependencies"] if group is None else PROJECT["optional-dependencies"][group]
    return [Requirement(text) for text in raw]


def _all_requirements() -> list[Requirement]:
    found = _requirements()
    for group in PROJECT["optional-dependencies"]:
        found += _requirements(group)
    return [r for r in found if canonicalize_name(r.name) != "animfleet"]


def _import(package: str) -> dict[str, str | None]:
    """What ``import <package>`` loads in a fresh interpreter: module name -> file."""
    probe = (
        f"import {package}, json, sys\n"
        "print(json.dumps({n: getattr(m, '__file__', None) for n, m in sys.modules.items()}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded: dict[str, str | None] = json.loads(result.stdout)
    return loaded


def _closure(requirements: list[Requirement]) -> set[str]:
    """The distributions that ``requirements`` install, as the installed metadata says."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            texts = requires(name) or []
        except PackageNotFoundError:
            continue
        for text in texts:
            requirement = Requirement(text)
            wanted = requirement.marker is None or any(
                requirement.marker.evaluate({"extra": extra}) for extra in {"", *extras}
            )
            if wanted:
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return {name for name, _ in seen}


def _third_party(module: str) -> bool:
    return module not in sys.stdlib_module_names and module not in (*OURS, "__future__")


def _top_level_imports(path: Path) -> set[str]:
    """Absolute imports anywhere in the module (lazy ones inside functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_importing_the_dispatcher_loads_nothing_heavy() -> None:
    loaded = _import("dispatcher")
    heavy = sorted(m for m in loaded if m.partition(".")[0] in HEAVY)
    assert not heavy, f"`import dispatcher` loaded {heavy}"


def _check_dependencies(package: str, declared: list[Requirement]) -> None:
    """``declared`` are all loaded by ``import <package>``, and what its modules import (lazily
    too) comes with the base install plus ``declared``."""
    loaded = _import(package)
    distributions = {
        module: {canonicalize_name(d) for d in dists}
        for module, dists in packages_distributions().items()
    }
    names = {canonicalize_name(r.name) for r in declared}
    used = {d for module in loaded for d in distributions.get(module.partition(".")[0], ())}
    assert names <= used, f"dependencies that `import {package}` never loads: {names - used}"
    provided = _closure(_requirements() + declared)
    missing: dict[str, set[str]] = {}
    for name, file in loaded.items():
        if name.partition(".")[0] not in OURS or not file:
            continue
        for module in filter(_third_party, _top_level_imports(Path(file))):
            if not distributions.get(module, set()) & provided:
                missing.setdefault(module, set()).add(name)
    assert not missing, f"imported by {package}'s modules, not declared: {missing}"


def test_the_base_dependencies_are_what_the_sdk_imports() -> None:
    _check_dependencies("animfleet_sdk", _requirements())
    broker = {"celery", "kombu", "redis", "torch"}
    assert not broker & _closure(_requirements()), "the base install pulls a broker or torch"


def test_the_fleet_extra_is_what_the_dispatcher_imports() -> None:
    _check_dependencies("dispatcher", _requirements("fleet"))


def test_torch_is_never_pinned_exactly() -> None:
    torch = [r for r in _all_requirements() if canonicalize_name(r.name) == "torch"]
    assert torch, "torch should be in the worker extra"
    assert all(not any(s.operator in ("==", "===") for s in r.specifier) for r in torch)
    assert "torch" not in {canonicalize_name(r.name) for r in _requirements()}


def test_the_lock_pins_every_requirement_compatibly() -> None:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            assert pinned and "+" not in pinned, f"expected NAME==VERSION (no local tag): {line}"
            pins[canonicalize_name(name)] = pinned.strip()
    assert pins.get("torch") == "2.13.0"  # matches the local CPU build, 2.13.0+cpu
    for requirement in _all_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, pyproject.toml wants {requirement}"
        )


def test_every_import_of_the_packages_comes_with_some_extra() -> None:
    runtime = [
        r
        for r in _all_requirements()
        if r not in _requirements("dev")  # the packages must not need test tools
    ]
    provided = _closure(runtime)
    distributions = packages_distributions()
    unknown: dict[str, set[str]] = {}
    for package in OURS:
        for path in (ROOT / package).rglob("*.py"):
            for module in filter(_third_party, _top_level_imports(path)):
                dists = {canonicalize_name(d) for d in distributions.get(module, ())}
                if not dists & provided:
                    unknown.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    assert not unknown, f"imports that no extra installs: {unknown}"
