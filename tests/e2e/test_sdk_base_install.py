"""The HTTP SDK from a venv with only the SDK's distribution (``pip install ./sdk-python``, as
the docs say): it holds no broker library, no torch and no top-level name but the SDK's own
(``animfleet_sdk``, ``animfleet_api``), imports in under 0.3 s, and its async client
runs 50 jobs with ``submit_many``, waited on, downloaded and checked with PyAV (here, where the
full install has it).

Needs ``ANIMFLEET_SDK_PYTHON``: the python of such a venv (``make test-sdk`` builds one and
sets it); skipped without it.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from animfleet.region.store_client import store_client
from animfleet.region.tenants import Tenants
from launcher.local_fleet import LocalFleet
from tests.fixtures.standin import ANIMATOR as STANDIN

PYTHON = os.environ.get("ANIMFLEET_SDK_PYTHON")
JOBS = 50
# Not one of these may be installed with the SDK: brokers, Redis, PyTorch, the web server.
FORBIDDEN = {"celery", "kombu", "redis", "hiredis", "billiard", "torch", "fastapi", "pillow"}
# Nor the fleet's packages: names a web app's own modules would clash with.
FLEET_NAMES = ("tools", "storage", "workers", "launcher", "dispatcher", "animfleet", "benchmarks")
IMPORT_BAR_S = 0.3
IMPORTS = 7  # fresh interpreters; the median is judged

pytestmark = pytest.mark.skipif(
    not PYTHON, reason="ANIMFLEET_SDK_PYTHON (a base-install venv's python) is not set"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("sdk-fleet"),
        regions=("sdk",),
        storage="s3",
        workers_per_region=2,
        model_dir=Path("standin:0.05:0.1"),
        animator=STANDIN,
        gateway=True,
        gateway_auth=True,
    ) as running:
        yield running


def _run(code: str, cwd: Path) -> str:
    """Run ``code`` in the base-install venv from outside the repository (only the venv's
    installed animfleet can be imported)."""
    assert PYTHON is not None
    done = subprocess.run(
        [PYTHON, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


def test_the_base_install_holds_no_broker_and_no_torch(tmp_path: Path) -> None:
    listed = _run(
        "import importlib.metadata as m, json\n"
        "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))",
        tmp_path,
    )
    installed = set(json.loads(listed))
    print("installed with the SDK:", ", ".join(sorted(installed)))
    assert {"animfleet-sdk", "httpx", "pydantic"} <= installed
    assert "animfleet" not in installed
    assert not installed & FORBIDDEN, f"the base install pulled {installed & FORBIDDEN}"


def test_the_sdk_installs_no_top_level_name_but_its_own(tmp_path: Path) -> None:
    found = _run(
        "import importlib.util, json, shutil\n"
        f"names = {FLEET_NAMES!r}\n"
        "print(json.dumps({'modules': [n for n in names if importlib.util.find_spec(n)],\n"
        "                  'command': shutil.which('animfleet')}))",
        tmp_path,
    )
    assert json.loads(found) == {"modules": [], "command": None}
    assert _run("import animfleet_sdk, animfleet_api; print('ok')", tmp_path) == "ok\n"


def test_importing_the_sdk_takes_under_a_bar(tmp_path: Path) -> None:
    """The CPU seconds the import takes (what it costs on an idle machine: the wall clock of a
    shared one also counts whoever else runs), the wall seconds printed beside them."""
    probe = (
        "import json, time\ncpu, wall = time.process_time(), time.perf_counter()\n"
        "import animfleet_sdk\n"
        "cpu, wall = time.process_time() - cpu, time.perf_counter() - wall\nimport sys\n"
        "print(json.dumps([cpu, wall, sorted({m.partition('.')[0] for m in sys.modules})]))"
    )
    cpu, wall = [], []
    for _ in range(IMPORTS):
        took_cpu, took_wall, modules = json.loads(_run(probe, tmp_path))
        cpu.append(took_cpu)
        wall.append(took_wall)
    loaded = set(modules)
    assert not loaded & FORBIDDEN, f"importing the SDK imported {loaded & FORBIDDEN}"
    median = statistics.median(cpu)
    print(
        f"import animfleet_sdk, median of {IMPORTS} fresh interpreters: {median:.3f} s CPU, "
        f"{statistics.median(wall):.3f} s wall"
    )
    assert median < IMPORT_BAR_S, f"importing the SDK took {median:.3f} s CPU (median)"


def test_50_jobs_from_a_base_install(
    fleet: LocalFleet, tmp_path: Path, make_image: Callable[..., bytes]
) -> None:
    av = pytest.importorskip("av")
    assert PYTHON is not None
    key = Tenants(store_client(fleet.store_url("sdk"))).create_key("sdk").key
    image = tmp_path / "input.png"
    image.write_bytes(make_image())
    script = Path(__file__).parents[1] / "sdk" / "base_client.py"
    out = tmp_path / "videos"
    argv = [PYTHON, str(script), fleet.gateway_url(), key, str(image), str(JOBS), str(out)]
    # Run from outside the repository, so only the venv's installed animfleet can be imported.
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    videos = sorted(out.glob("*.mp4"))
    assert len(videos) == JOBS
    for video in videos:
        with av.open(io.BytesIO(video.read_bytes())) as container:
            assert sum(1 for _ in container.decode(video=0)) == 4
