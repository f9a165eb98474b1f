"""The TypeScript SDK (sdk-typescript/): its types match what the gateway serves, and its tests
(Node's own runner, on the compiled JS) pass against a real local fleet with API keys.

The document check needs only Python. The rest needs ``node`` (20+) and ``npm``: it skips,
saying so, only where they are missing; ``npm ci`` runs when node_modules does not match the
committed lock (the registry is reached then, not on later runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from launcher.local_fleet import LocalFleet
from storage.factory import open_store

SDK = Path(__file__).resolve().parents[2] / "sdk-typescript"
REGION = "ts"
TENANT = "ts-sdk"
REGENERATE = "cd sdk-typescript && npm run generate (PYTHON=<the venv's python> if not ../.venv)"
LOCK_STAMP = SDK / "node_modules" / ".animfleet-lock-sha256"


def test_the_committed_openapi_document_is_what_the_gateway_serves(tmp_path: Path) -> None:
    served = tmp_path / "openapi.json"
    done = subprocess.run(
        [sys.executable, str(SDK / "scripts" / "dump_openapi.py"), str(served)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    committed = json.loads((SDK / "openapi.json").read_text())
    assert json.loads(served.read_text()) == committed, (
        f"sdk-typescript/openapi.json is not what the gateway serves: {REGENERATE}"
    )


def _npm(*args: str, timeout: float = 600) -> None:
    npm = shutil.which("npm")
    assert npm is not None
    done = subprocess.run([npm, *args], cwd=SDK, capture_output=True, text=True, timeout=timeout)
    output = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{output}"


@pytest.fixture(scope="module")
def built() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the TypeScript SDK cannot be built here")
    return build_typescript_sdk()


def build_typescript_sdk() -> Path:
    """sdk-typescript installed from its lock, its types checked against the document, built;
    the folder of its compiled tests (``dist`` beside it is the package)."""
    lock = hashlib.sha256((SDK / "package-lock.json").read_bytes()).hexdigest()
    if not LOCK_STAMP.is_file() or LOCK_STAMP.read_text() != lock:
        _npm("ci", "--no-audit", "--no-fund")
        LOCK_STAMP.write_text(lock)
    _npm("run", "check-types", timeout=120)  # src/schema.d.ts is what openapi.json generates
    _npm("run", "build", timeout=300)
    return SDK / "dist-test"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, shipped_model: Path) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("ts-fleet"),
        regions=(REGION,),
        storage="s3",
        workers_per_region=1,
        model_dir=shipped_model,
        gateway=True,
        gateway_auth=True,
        # The tests serve an image URL from loopback.
        service_env={"ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1"},
    ) as running:
        yield running


def _api_key(fleet: LocalFleet) -> str:
    """A key as an operator makes one: ``animfleet keys create`` on the fleet's file."""
    argv = [sys.executable, "-m", "launcher", "--fleet", str(fleet.fleet_file)]
    done = subprocess.run(
        [*argv, "keys", "create", "--tenant", TENANT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


# Building the SDK and starting the fleet (its worker loads the shipped model) took 180 s of the
# 250 s here on two shared cores: the default 300 s would be too close.
@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_the_node_tests_pass_against_a_local_fleet(
    built: Path, fleet: LocalFleet, tmp_path: Path, make_image: Callable[..., bytes]
) -> None:
    image = make_image(32, 32, seed=7)
    path = tmp_path / "input.png"
    path.write_bytes(image)
    key = f"inputs/{TENANT}/input.png"
    open_store(fleet.topology.region(REGION).storage).put(key, image, "image/png")
    env = {
        **os.environ,
        "ANIMFLEET_URL": fleet.gateway_url(REGION),
        "ANIMFLEET_API_KEY": _api_key(fleet),
        "ANIMFLEET_TEST_IMAGE": str(path),
        "ANIMFLEET_TEST_IMAGE_KEY": key,
    }
    # What the running gateway serves is what the SDK's types were generated from.
    served = httpx.get(fleet.gateway_url(REGION) + "/openapi.json", timeout=30).json()
    assert served == json.loads((SDK / "openapi.json").read_text()), REGENERATE
    node = shutil.which("node")
    assert node is not None
    tests = sorted(str(path) for path in built.glob("*.test.js"))  # files: any Node 20+ runs them
    assert len(tests) >= 2, tests
    done = subprocess.run(
        [node, "--test", "--test-concurrency=1", *tests],
        cwd=SDK,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(done.stdout[-8000:])  # each test's outcome and duration (pytest -s shows it)
    assert done.returncode == 0, f"node --test failed:\n{done.stdout[-12000:]}{done.stderr[-4000:]}"
    assert "# fail 0" in done.stdout and "# SKIP" not in done.stdout, done.stdout[-4000:]
