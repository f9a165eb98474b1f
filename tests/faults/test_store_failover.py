"""A cluster store fails over with jobs being admitted: the master serving the store's slot is
SIGKILLed, its replica is promoted, and every admission a caller saw acknowledged survives and
leaves the backlog afterwards (0 lost, 0 stuck).

Callers retry an admission that raised with the same job id, as the gateway's callers do: an
``EXISTS`` answer then means the earlier try was written. Redis replication is asynchronous, so
this setup does not guarantee zero loss (see docs/operations.md's loss table); on loopback the
replica has every acknowledged write before the master dies, which is what this test checks
for the client's side: slot-map refresh, retries and the scripts after a failover.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord
from animfleet.region.admission import AdmissionOutcome, AdmissionScript
from animfleet.region.backlog import Backlog
from animfleet.region.handoff import Handoff
from animfleet.region.keys import JOB_KEY, KEY_PREFIX, QUEUED_SET
from animfleet.region.store_client import store_client
from animfleet.region.workers import WorkerRegistry
from launcher.local_cluster import LocalCluster

pytestmark = pytest.mark.faults

REGION = "fo"
QUEUE = KEY_PREFIX + "queue:animate.fo"  # stands in for the GPU queue: a list in the slot
PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)


def admit_until_acknowledged(script: AdmissionScript, job_id: str, deadline: float) -> None:
    record = JobRecord(id=job_id, region=REGION, home_region=REGION, params=PARAMS, tenant="t")
    while time.monotonic() < deadline:
        try:
            answer = script.admit(
                record, b"img", mode="backlog", message=f"m-{job_id}", queue=QUEUE, allowance=0.0
            )
        except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError):
            time.sleep(0.05)  # the slot's master is gone until its replica takes over
            continue
        assert answer.outcome in (AdmissionOutcome.BACKLOGGED, AdmissionOutcome.EXISTS), answer
        return
    raise TimeoutError(f"{job_id} was never acknowledged")


def test_killing_the_slots_master_loses_no_acknowledged_job(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, node_timeout_ms=1000) as cluster:
        client = store_client(cluster.url)
        script = AdmissionScript(client, REGION)
        acknowledged: list[str] = []
        at_kill: list[int] = []  # how many were acknowledged when the master died
        deadline = time.monotonic() + 60

        def submit() -> None:
            # Admit before, during and until 100 jobs after the failover.
            while not at_kill or len(acknowledged) < at_kill[0] + 100:
                job_id = f"{REGION}.j{len(acknowledged):05d}"
                admit_until_acknowledged(script, job_id, deadline)
                acknowledged.append(job_id)

        writer = threading.Thread(target=submit, daemon=True)
        writer.start()
        while len(acknowledged) < 200:  # jobs in flight before the fault
            time.sleep(0.01)
        master = cluster.master_of(KEY_PREFIX)
        cluster.kill(master)
        started = time.monotonic()
        at_kill.append(len(acknowledged))
        writer.join(timeout=90)
        assert not writer.is_alive(), "admissions did not resume after the failover"
        assert cluster.master_of(KEY_PREFIX) != master  # the replica took the slot over
        print(f"failover: writes resumed; {len(acknowledged)} acknowledged in all, "
              f"{time.monotonic() - started:.1f}s from the kill to the last")  # fmt: skip

        missing = [job for job in acknowledged if not client.exists(JOB_KEY + job)]
        assert missing == [], f"{len(missing)} acknowledged jobs lost: {missing[:5]}"
        assert Backlog(client, REGION).depth() == len(acknowledged)

        # None stuck: with room, the hand-off moves every one onto the queue's store list.
        WorkerRegistry(client, REGION).beat("gpu", {}, ttl_s=60, busy=False)
        handoff = Handoff(client, REGION, QUEUE, allowance=float(len(acknowledged)))
        moved: list[str] = []
        while (taken := handoff.move_home(most=500)).jobs:
            moved += taken.jobs
        assert sorted(moved) == sorted(acknowledged)
        assert client.llen(QUEUE) == len(acknowledged)
        assert client.zcard(QUEUED_SET + REGION) == len(acknowledged)
        client.close()
