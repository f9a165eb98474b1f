"""Per-tenant retention, applied by the region's sweeper: a tenant's ended jobs are erased
(in Redis or archived) once its retention has run out, counted in its usage; others stay."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from animfleet.jobs import JobOutput, JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.erasure import Erasure
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.sweeper import Sweeper, SweepSettings
from animfleet.region.tenants import Limits, Tenants
from animfleet.region.usage import LAG_S, day_of, fleet_days
from animfleet.settings import load
from animfleet.topology import Region
from storage.local import LocalStore

PARAMS = JobParams(prompt="pan", frames=4, fps=8, width=32, height=32, seed=1)


def _succeeded(store: JobStore, objects: LocalStore, tenant: str) -> JobRecord:
    record = JobRecord(id=new_job_id("rt"), region="rt", home_region="rt", params=PARAMS)
    record.tenant = tenant
    seed(store.redis, record, b"image")
    key = f"outputs/{record.id}/run.mp4"
    objects.put(key, b"mp4", "video/mp4")

    def finish(current: JobRecord) -> None:
        current.transition(JobState.RUNNING)
        current.output = JobOutput(key=key, bytes=3, frames=4, fps=8, width=32, height=32)
        current.transition(JobState.SUCCEEDED)

    return store.update(record.id, finish)


def test_the_sweeper_erases_jobs_past_their_tenants_retention(
    store_region: Callable[[str], Region], redis_client: redis.Redis, tmp_path: Path
) -> None:
    store, objects = JobStore(redis_client), LocalStore(tmp_path)
    region = store_region("rt")
    Tenants(redis_client).set_limits("brief", Limits(retention_s=60))
    Tenants(redis_client).set_limits("keeper", Limits())
    settings = load(
        SweepSettings, {}, heartbeat_ttl_s=0.001, retention_every_s=0, archive_after_s=0
    )
    sweeper = Sweeper(region, store, settings, objects=objects)
    brief = _succeeded(store, objects, "brief")
    kept = _succeeded(store, objects, "keeper")
    now = time.time() + LAG_S
    first = sweeper.sweep(now)  # indexed, not yet due; archived: out of Redis
    assert first.retention_deleted == [] and set(first.archived) == {brief.id, kept.id}

    assert sweeper.sweep(now + 61).retention_deleted == [brief.id]
    assert objects.list_keys(f"outputs/{brief.id}") == []
    assert objects.list_keys(f"records/{brief.id}") == []
    assert Erasure(redis_client).deleted_at(brief.id, "brief") is not None
    with pytest.raises(JobNotFound):
        store.get(brief.id)
    assert objects.list_keys(f"outputs/{kept.id}") == [f"outputs/{kept.id}/run.mp4"]
    assert objects.list_keys(f"records/{kept.id}") == [f"records/{kept.id}.json"]

    sweeper.sweep(now + 62)  # the roll-up takes the retention's note
    today = day_of(time.time())
    (usage,) = fleet_days([sweeper.usage], "brief", today, today)  # type: ignore[list-item]
    assert usage.retention_deleted == 1 and usage.jobs["succeeded"] == 1
