"""A masked job through the runner on a real Redis: the mask travels packed with the image and
reaches the model; a record naming a mask its stored input lacks, or an undecodable mask, fails
the job with the input's code, not the model's."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from PIL import Image

from animfleet.job_inputs import MASK as MASK_PART
from animfleet.job_inputs import JobInputs
from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.topology import Region
from storage.local import LocalStore
from workers.model import Animator
from workers.model.imaging.mask import mask_region
from workers.model.runtime.loading import prepare_image
from workers.runner import JobRunner
from workers.settings import WorkerSettings


def _stored(image: bytes, mask: bytes) -> bytes:
    return JobInputs(image, {MASK_PART: mask}).pack()


def _mask() -> bytes:
    inside = np.zeros((32, 32), dtype=np.uint8)
    inside[8:24, 4:20] = 255
    buffer = io.BytesIO()
    Image.fromarray(inside).save(buffer, format="PNG")
    return buffer.getvalue()


MASK = _mask()
PARAMS = JobParams(
    prompt="zoom in",
    frames=4,
    fps=8,
    width=32,
    height=32,
    seed=2,
    steps=2,
    mask=hashlib.sha256(MASK).hexdigest(),
)


class Recording:
    """The real animator, keeping what each job was given and gave back."""

    def __init__(self, animator: Animator) -> None:
        self.animator = animator
        self.calls: list[tuple[bytes | None, np.ndarray]] = []

    def animate(self, image: bytes, params: JobParams, on_step: Any = None, **kw: Any) -> Any:
        frames = self.animator.animate(image, params, on_step, **kw)
        self.calls.append((kw.get("mask"), frames))
        return frames


@pytest.fixture(scope="module")
def animator(random_model: Path) -> Animator:
    return Animator(random_model)


@pytest.fixture
def run_job(
    redis_client: redis.Redis, tmp_path: Path, animator: Animator
) -> Callable[..., tuple[JobRecord, Recording]]:
    def run(stored: bytes, params: JobParams = PARAMS) -> tuple[JobRecord, Recording]:
        store = JobStore(redis_client)
        record = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=params)
        seed(store.redis, record, stored)
        model = Recording(animator)
        JobRunner(
            region=Region(name="r1", broker_url="redis://unused"),
            settings=WorkerSettings(max_deliveries=3),
            store=store,
            objects=LocalStore(tmp_path / "objects"),
            animator=model,  # type: ignore[arg-type]
            worker_name="w1",
        ).run(record.id)
        return store.get(record.id), model

    return run


def test_a_masked_job_gives_the_model_its_mask_and_keeps_the_rest_still(
    run_job: Callable[..., tuple[JobRecord, Recording]], make_image: Callable[..., bytes]
) -> None:
    image = make_image(64, 64, 5)
    record, model = run_job(_stored(image, MASK))
    assert record.status is JobState.SUCCEEDED, record.error
    assert record.output is not None and record.output.frames == 4
    [(mask, frames)] = model.calls
    assert mask == MASK
    outside = ~mask_region(MASK, 32, 32, 8).inside
    fitted = prepare_image(image, 32, 32)
    assert (frames[:, outside] == fitted[outside]).all()


def test_a_mask_the_stored_input_lacks_fails_the_job_as_input_missing(
    run_job: Callable[..., tuple[JobRecord, Recording]], make_image: Callable[..., bytes]
) -> None:
    record, model = run_job(make_image(32, 32))
    assert record.status is JobState.FAILED and record.error is not None
    assert record.error.code == "input_missing" and "mask" in record.error.message
    assert model.calls == []


def test_an_undecodable_stored_mask_fails_the_job_as_input_invalid(
    run_job: Callable[..., tuple[JobRecord, Recording]], make_image: Callable[..., bytes]
) -> None:
    broken = MASK[:40]
    params = PARAMS.model_copy(update={"mask": hashlib.sha256(broken).hexdigest()})
    record, _ = run_job(_stored(make_image(32, 32), broken), params)
    assert record.status is JobState.FAILED and record.error is not None
    assert record.error.code == "input_invalid" and record.error.message.startswith("mask:")
    assert "cannot be decoded" in record.error.message


def test_a_stored_mask_other_than_the_submitted_one_fails_the_job_as_input_invalid(
    run_job: Callable[..., tuple[JobRecord, Recording]], make_image: Callable[..., bytes]
) -> None:
    record, model = run_job(_stored(make_image(32, 32), _mask()[:-1] + b"\x00"))
    assert record.status is JobState.FAILED and record.error is not None
    assert record.error.code == "input_invalid" and "not the one submitted" in record.error.message
    assert model.calls == []
