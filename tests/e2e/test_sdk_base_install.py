"""The async SDK from a venv with only the base install: 50 jobs with ``submit_many``, waited
on, downloaded and checked with PyAV (here, where the full install has it).

Needs ``ANIMFLEET_SDK_PYTHON``: the python of such a venv (``make test-sdk`` builds one and
sets it); skipped without it.
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from animfleet.region.tenants import Tenants
from tests.fixtures.standin import ANIMATOR as STANDIN
from tools.localfleet import LocalFleet

PYTHON = os.environ.get("ANIMFLEET_SDK_PYTHON")
JOBS = 50

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


def test_50_jobs_from_a_base_install(
    fleet: LocalFleet, tmp_path: Path, make_image: Callable[..., bytes]
) -> None:
    av = pytest.importorskip("av")
    assert PYTHON is not None
    key = Tenants(redis.Redis.from_url(fleet.redis_url("sdk"))).create_key("sdk").key
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
