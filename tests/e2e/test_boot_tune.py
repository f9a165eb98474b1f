"""Real worker processes on a device kind the serving profile lacks: the first measures its
entry at boot and stores it in the region's bucket, a second reads it, and jobs are served."""

from __future__ import annotations

from pathlib import Path

import pytest

from animfleet.jobs import JobState
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from storage import open_store
from tests.workers.model.tiny import tiny_student
from workers.model.runtime.boot_tune import shared_key
from workers.model.runtime.profile import DeviceProfile

pytestmark = pytest.mark.e2e

KIND = "cpu:E2E-FAKE+bf16"


def test_workers_of_an_unprofiled_kind_measure_once_and_serve(
    tmp_path: Path, make_image: object
) -> None:
    model = tiny_student(tmp_path / "student")
    env = {
        "ANIMFLEET_WORKER_DEVICE_KIND": KIND,
        "ANIMFLEET_WORKER_BOOT_TUNE_S": "30",
        "ANIMFLEET_WORKER_BOOT_TUNE_COMPILE": "0",  # torch.compile: a minute on this CPU
        "ANIMFLEET_WORKER_SHAPE_BUCKETS": "4x32x32",
    }
    with LocalFleet(tmp_path / "fleet", regions=("bt",), model_dir=model, worker_env=env) as fleet:
        objects = open_store(fleet.topology.region("bt").storage)
        entry = DeviceProfile.model_validate_json(objects.get(shared_key(model, KIND)))
        assert entry.device == KIND and "measured at worker boot" in entry.note
        assert {m.choice.precision for m in entry.measured} == {"fp32", "bf16"}

        second = fleet.start_worker("bt", 1)
        fleet.wait_for_workers({"bt": 2})
        log = (fleet.root / "logs" / f"{second}.log").read_text()
        assert f"measured by a peer of kind {KIND}" in log

        client = Client(fleet.topology)
        try:
            image = make_image(32, 32)  # type: ignore[operator]
            job = client.submit(image, "pan left", home_region="bt", frames=4, width=32, height=32)
            record = job.wait(timeout=120)
        finally:
            client.close()
        assert record.status is JobState.SUCCEEDED, record.error
