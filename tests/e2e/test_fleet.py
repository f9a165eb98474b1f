"""The whole data path with real processes: submit -> regional queue -> worker -> MP4 in S3."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Callable

import av
import pytest
import redis

from animfleet.jobs import JobState
from animfleet.topology import Topology
from dispatcher import Client, InvalidInput
from launcher.local_fleet import LocalFleet
from storage import open_store
from workers.heartbeat import Heartbeat

pytestmark = pytest.mark.e2e


def fetch_output(fleet: LocalFleet, region: str, key: str) -> bytes:
    return open_store(fleet.topology.region(region).storage).get(key)


def test_each_job_runs_in_its_home_region(
    fleet: LocalFleet, client: Client, make_image: Callable[..., bytes]
) -> None:
    jobs = {
        region: client.submit(
            make_image(96, 64), "zoom in", home_region=region, frames=6, fps=12, width=96, height=64
        )
        for region in ("east", "west")
    }
    for region, job in jobs.items():
        record = job.wait(timeout=120)
        assert record.status is JobState.SUCCEEDED, record.error
        assert record.region == region and job.id.startswith(f"{region}.")
        assert record.worker is not None and record.worker.startswith(f"worker-{region}-")
        assert record.attempts == 1
        assert record.metrics.queue_time is not None and record.metrics.total_time is not None
        video = fetch_output(fleet, region, record.output.key)
        assert len(video) == record.output.bytes
        with av.open(io.BytesIO(video)) as container:
            stream = container.streams.video[0]
            frames = list(container.decode(stream))
            assert float(stream.average_rate) == 12
        assert len(frames) == 6 and (frames[0].width, frames[0].height) == (96, 64)


def test_sigkill_mid_job_redelivers_and_succeeds_exactly_once(
    fleet: LocalFleet, client: Client, make_image: Callable[..., bytes]
) -> None:
    job = client.submit(make_image(), "rotate clockwise", home_region="east", steps=100)
    deadline = time.monotonic() + 60
    while job.get().progress.step < 2:  # mid-inference, not before it
        assert time.monotonic() < deadline, "job never started running"
        time.sleep(0.02)
    beat = next(b for b in fleet.heartbeats("east") if b["job_id"] == job.id)
    os.kill(int(beat["pid"]), signal.SIGKILL)  # the process that holds the model and the job

    record = job.wait(timeout=180)
    assert record.status is JobState.SUCCEEDED, record.error
    assert record.attempts == 2
    store = open_store(fleet.topology.region("east").storage)
    assert [key for key in store.list_keys("outputs/") if job.id in key] == [record.output.key]


INVALID: list[tuple[str, dict[str, object], str]] = [
    ("not an image", {"image": b"GIF89a-not-really"}, "image"),
    ("truncated png", {"image": "truncated"}, "image"),
    ("30000x30000 png header", {"image": "bomb"}, "image"),
    ("oversize bytes", {"image": b"\x89PNG\r\n\x1a\n" + b"\0" * (11 * 2**20)}, "image"),
    ("prompt too long", {"prompt": "pan " * 200}, "prompt"),
    ("frames out of range", {"frames": 33}, "frames"),
    ("size not a multiple of 8", {"width": 100}, "width"),
]


@pytest.mark.parametrize(("case", "change", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_input_is_rejected_and_nothing_is_published(
    fleet: LocalFleet,
    make_image: Callable[..., bytes],
    png_header_claiming: Callable[[int, int], bytes],
    case: str,
    change: dict[str, object],
    field: str,
) -> None:
    # A region nobody consumes, in its own database: anything published would stay visible.
    broker = redis.Redis(port=fleet.redis_port, db=9)
    broker.flushdb()
    idle = Topology.from_mapping(
        {"regions": {"idle": {"broker_url": f"redis://127.0.0.1:{fleet.redis_port}/9"}}}, env={}
    )
    client = Client(idle)
    good = make_image()
    images = {"truncated": good[: len(good) // 2], "bomb": png_header_claiming(30000, 30000)}
    request: dict[str, object] = {"image": good, "prompt": "pan left", **change}
    request["image"] = images.get(request["image"], request["image"])  # type: ignore[arg-type]

    with pytest.raises(InvalidInput) as caught:
        client.submit(**request)  # type: ignore[arg-type]
    assert caught.value.field == field, case
    assert broker.dbsize() == 0, f"{case}: something was stored or published"

    # The probe itself works: with one (heartbeat-only) GPU, a valid job is visible at once.
    Heartbeat(broker, "idle", "probe", "none", ttl_s=30).beat()
    client.submit(good, "pan left")
    assert broker.llen("animate.idle") == 1
    client.close()
    broker.flushdb()
