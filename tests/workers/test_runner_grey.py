"""Greyscale in, greyscale out, through the worker's runner on a real Redis with the shipped
model: a grey photograph (a single-channel PNG, or RGB with equal channels) comes back as an
MP4 whose every decoded pixel has its channels within 2 levels, at 64 and 512 px, masked or
not; a colour photograph keeps its colour."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
import redis
from PIL import Image

from animfleet.job_inputs import MASK, JobInputs
from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.topology import Region
from storage.local import LocalStore
from tools.training.data.photos import photo_uint8
from workers.model import Animator
from workers.model.imaging.grey import is_grey, to_grey
from workers.runner import JobRunner
from workers.settings import WorkerSettings


def _png(pixels: np.ndarray, mode: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="PNG")
    return buffer.getvalue()


def _mask(size: int) -> bytes:
    inside = np.zeros((size, size), dtype=np.uint8)
    inside[size // 4 : 3 * size // 4, size // 8 : size // 2] = 255
    return _png(inside, "L")


PHOTO = photo_uint8("astronaut")  # colourful: the model would tint a grey copy of it


@pytest.fixture(scope="module")
def animator(shipped_model: Path) -> Animator:
    return Animator(shipped_model)


@pytest.fixture
def run_job(
    redis_client: redis.Redis, tmp_path: Path, animator: Animator
) -> Callable[..., np.ndarray]:
    def run(image: bytes, size: int, mask: bytes | None = None) -> np.ndarray:
        store, objects = JobStore(redis_client), LocalStore(tmp_path / "objects")
        params = JobParams(
            prompt="pan left fast",
            frames=4,
            fps=8,
            width=size,
            height=size,
            seed=3,
            steps=2,
            mask=hashlib.sha256(mask).hexdigest() if mask else None,
        )
        record = JobRecord(id=new_job_id("r1"), region="r1", home_region="r1", params=params)
        seed(store.redis, record, JobInputs(image, {MASK: mask} if mask else {}).pack())
        JobRunner(
            region=Region(name="r1", broker_url="redis://unused"),
            settings=WorkerSettings(max_deliveries=3),
            store=store,
            objects=objects,
            animator=animator,
            worker_name="w1",
        ).run(record.id)
        done = store.get(record.id)
        assert done.status is JobState.SUCCEEDED, done.error
        assert done.output is not None
        with av.open(io.BytesIO(objects.get(done.output.key))) as container:
            return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])

    return run


def _spread(frames: np.ndarray) -> int:
    return int((frames.max(axis=-1).astype(np.int16) - frames.min(axis=-1)).max())


@pytest.mark.parametrize("size", [64, 512])
@pytest.mark.parametrize("mode", ["L", "LA", "RGB"])
def test_a_grey_input_gives_grey_frames(
    run_job: Callable[..., np.ndarray], size: int, mode: str
) -> None:
    grey = np.asarray(Image.fromarray(PHOTO).convert("L").convert(mode))
    image = _png(grey, mode)
    assert is_grey(image)
    frames = run_job(image, size)
    assert frames.shape == (4, size, size, 3)
    assert _spread(frames) <= 2


@pytest.mark.parametrize("size", [64, 512])
def test_a_masked_grey_input_gives_grey_frames(
    run_job: Callable[..., np.ndarray], size: int
) -> None:
    image = _png(np.asarray(Image.fromarray(PHOTO).convert("L")), "L")
    assert _spread(run_job(image, size, _mask(size))) <= 2


def test_a_colour_input_keeps_its_colour(run_job: Callable[..., np.ndarray]) -> None:
    image = _png(PHOTO, "RGB")
    assert not is_grey(image)
    assert _spread(run_job(image, 64)) > 30


def test_to_grey_sets_every_channel_to_the_luma() -> None:
    frames = np.array([[[[255, 0, 0], [10, 20, 30]]]], dtype=np.uint8)
    assert to_grey(frames).tolist() == [[[[76, 76, 76], [18, 18, 18]]]]
