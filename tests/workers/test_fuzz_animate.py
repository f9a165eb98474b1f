"""Property-based: whatever bytes a job's stored input holds (a corrupted or hostile file that
never went through the dispatcher), the worker ends the job in a terminal state and keeps going.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.topology import Region
from storage.local import LocalStore
from tests.fixtures.standin import StandinAnimator
from workers.runner import JobRunner
from workers.settings import WorkerSettings

PARAMS = JobParams(prompt="pan", frames=2, fps=8, width=32, height=32, seed=0)


def _png() -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (24, 24, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@st.composite
def inputs(draw: st.DrawFn) -> bytes:
    data = bytearray(_png())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= draw(st.integers(1, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) if draw(st.booleans()) else bytes(data)


@pytest.fixture
def runner(redis_client: redis.Redis, tmp_path: Path) -> JobRunner:
    return JobRunner(
        region=Region(name="fz", broker_url="redis://unused"),
        settings=WorkerSettings(),
        store=JobStore(redis_client),
        objects=LocalStore(tmp_path / "objects"),
        animator=StandinAnimator(0.0, jitter=0.0),
        worker_name="fuzz",
    )


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(image=st.one_of(inputs(), st.binary(max_size=64)))
def test_any_stored_input_ends_the_job_and_never_crashes_the_worker(
    runner: JobRunner, image: bytes
) -> None:
    record = JobRecord(id=new_job_id("fz"), region="fz", home_region="fz", params=PARAMS)
    seed(runner.store.redis, record, image)
    runner.run(record.id)  # must not raise: a raise here would be a crashed task
    done = runner.store.get(record.id)
    assert done.status in (JobState.SUCCEEDED, JobState.FAILED)
    if done.status is JobState.FAILED:
        # Undecodable bytes are an input error, named as such, never an internal one.
        assert done.error is not None and done.error.code in {"input_invalid", "model_error"}
    else:
        assert done.output is not None and done.output.frames == PARAMS.frames
