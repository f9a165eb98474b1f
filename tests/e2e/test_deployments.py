"""Model versions end to end: real workers fetch versions from the regions' S3 registries and
run the one each job was given; a failing canary is rolled back by the workers themselves."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from animfleet.jobs import JobState
from animfleet.region.deployments import Deployments
from animfleet.region.jobstore import JobStore
from animfleet.region.store_client import store_client
from dispatcher import Client
from launcher.command import main
from launcher.local_fleet import LocalFleet
from storage import open_store
from storage.registry import ModelRegistry
from tests.fixtures.model_copies import copy_model, fewer_steps, poisoned

STABLE, CANARY, BROKEN = "anim@1", "anim@2", "anim@broken"
SMALL = {"frames": 4, "width": 32, "height": 32}


def cli(fleet: LocalFleet, *argv: str) -> None:
    assert main(["--fleet", str(fleet.fleet_file), *argv]) == 0, argv


@pytest.fixture(scope="module")
def versions(
    fleet: LocalFleet, shipped_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalFleet]:
    root = tmp_path_factory.mktemp("versions")
    cli(fleet, "model", "push", str(copy_model(shipped_model, root / "stable")), STABLE)
    cli(fleet, "model", "push", str(fewer_steps(shipped_model, root / "canary")), CANARY)
    # Only east holds the broken version: its jobs cannot spill to west.
    broken = poisoned(shipped_model, root / "broken")
    cli(fleet, "model", "push", str(broken), BROKEN, "--region", "east")
    cli(fleet, "deploy", "set", "split", f"{STABLE}=90", f"{CANARY}=10", "--stable", STABLE)
    yield fleet


def finished(client: Client, handles: list[str], timeout: float = 240) -> list:  # type: ignore[type-arg]
    return [client.wait(job_id, timeout) for job_id in handles]


def test_a_90_10_deployment_splits_200_jobs_and_pins_are_honoured(
    versions: LocalFleet, client: Client, make_image: object
) -> None:
    image = make_image(32, 32)  # type: ignore[operator]
    ids = [
        client.submit(
            image,
            "pan left",
            home_region="east",
            model="split",
            idempotency_key=f"split-{i}",
            **SMALL,
        ).id
        for i in range(200)
    ]
    pinned = {
        client.submit(image, "zoom in", home_region="east", model=ref, **SMALL).id: ref
        for ref in (STABLE, CANARY, STABLE, CANARY)
    }
    records = finished(client, ids + list(pinned))
    assert all(r.status is JobState.SUCCEEDED for r in records), [r.error for r in records]
    by_version = Counter(r.params.model_version for r in records[:200])
    canary = by_version[CANARY]
    print(f"\ncanary served {canary} of 200 jobs (weight 10%); by version: {dict(by_version)}")
    assert set(by_version) == {STABLE, CANARY}
    # Binomial(200, 0.1): mean 20, sd 4.24; 99.9 % of draws lie within 3.3 sd.
    assert abs(canary - 20) <= 3.3 * math.sqrt(200 * 0.1 * 0.9)
    for record in records[200:]:
        assert record.params.model_version == pinned[record.id]
    # A retried submit with the same key is the same job, on the same version.
    again = client.submit(
        image, "pan left", home_region="east", model="split", idempotency_key="split-7", **SMALL
    )
    assert (
        not again.created
        and client.get(again.id).params.model_version == records[7].params.model_version
    )
    # A job that names nothing runs the worker's own model, and says which.
    own = client.submit(image, "pan left", home_region="west", **SMALL).wait(120)
    assert own.params.model_version is not None
    assert own.params.model_version.startswith(f"{Path(str(versions.model_dir)).name}@sha256-")


def test_a_canary_failing_every_job_is_rolled_back(
    versions: LocalFleet, client: Client, make_image: object
) -> None:
    min_samples = 3
    cli(
        versions,
        "deploy",
        "set",
        "risky",
        f"{STABLE}=50",
        f"{BROKEN}=50",
        "--stable",
        STABLE,
        "--min-samples",
        str(min_samples),
        "--region",
        "east",
    )
    image = make_image(32, 32)  # type: ignore[operator]
    ids = [
        client.submit(
            image, "sway", home_region="east", model="risky", idempotency_key=f"risky-{i}", **SMALL
        ).id
        for i in range(30)
    ]
    records = finished(client, ids)
    failed = [r for r in records if r.status is JobState.FAILED]
    assert all(r.error is not None and r.error.code == "model_error" for r in failed)
    assert all(r.params.model_version == BROKEN for r in failed)
    deployments = Deployments(store_client(versions.store_url("east")), "east")
    after = deployments.get("risky")
    assert after is not None and after.versions[BROKEN] == 0.0
    (rollback,) = [e for e in deployments.events(deployment="risky") if e.kind == "rollback"]
    print(f"\nrolled back after {len(failed)} failed jobs: {rollback.reason}")
    # Each worker judges after each job it ends, so the rollback came at the min_samples-th
    # failure; only jobs other east workers were running by then can fail after it (with the
    # fleet's one east worker: exactly min_samples), and it names the jobs the canary failed.
    others = len(versions.heartbeats("east")) - 1
    assert min_samples <= len(failed) <= min_samples + others
    assert min_samples <= len(rollback.failed_jobs) <= min_samples + others
    assert set(rollback.failed_jobs) <= {r.id for r in failed}
    assert all(r.params.model_version == STABLE for r in records if r.status is JobState.SUCCEEDED)
    later = [
        client.submit(image, "sway", home_region="east", model="risky", **SMALL).id
        for _ in range(10)
    ]
    for record in finished(client, later):
        assert record.status is JobState.SUCCEEDED and record.params.model_version == STABLE


def test_a_version_whose_files_do_not_match_their_hash_stops_the_worker_at_boot(
    versions: LocalFleet, shipped_model: Path, tmp_path: Path
) -> None:
    model = copy_model(shipped_model, tmp_path / "tampered")
    (model / "NOTES.txt").write_text(f"unique to this test: {os.getpid()} {tmp_path}")
    cli(versions, "model", "push", str(model), "anim@tampered", "--region", "east")
    region = versions.topology.region("east")
    registry = ModelRegistry(open_store(region.storage), region.storage.prefix)
    notes = next(f for f in registry.manifest("anim@tampered").files if f.path == "NOTES.txt")
    open_store(region.storage).put(
        registry.blob_key(notes.sha256), b"swapped in the bucket", "text/plain"
    )
    env = {
        **os.environ,
        "ANIMFLEET_FLEET_FILE": str(versions.fleet_file),
        "ANIMFLEET_MODEL_DIR": str(shipped_model),
        "ANIMFLEET_WORKER_MODELS": "anim@tampered",
        "ANIMFLEET_WORKER_MODEL_CACHE": str(tmp_path / "cache"),
    }
    worker = subprocess.run(
        [sys.executable, "-m", "launcher", "worker", "--region", "east"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 78, worker.stderr[-2000:]
    assert "anim@tampered: NOTES.txt has sha256" in worker.stderr
    assert "refusing to serve it" in worker.stderr
    assert not JobStore.from_url(region.store).redis.exists("{animfleet}:worker:east:tampered")
