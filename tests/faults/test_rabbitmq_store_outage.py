"""RabbitMQ as the broker, the job store down for longer than the queue's delivery limit allows
redeliveries: no job is dead-lettered for it, none fails ``worker_lost``; every one succeeds once
the store is back."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from animfleet.region.broker import DELIVERY_LIMIT_ENV
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from launcher.local_rabbitmq import rabbitmq_available
from tests.faults.conftest import record_of, report_case, running_on, settle, standin, wait_until

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not rabbitmq_available(), reason="rabbitmq-server is not installed"),
]

LIMIT = 3  # the quorum queue's delivery limit here (25 in production)


def handed_back(fleet: LocalFleet) -> Counter[str]:
    """How often each job's delivery was put back on the broker while the store was away."""
    counts: Counter[str] = Counter()
    for path in (fleet.root / "logs").glob("worker-*.log"):
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == "job.handed_back":
                counts[str(entry["job_id"])] += 1
    return counts


def test_a_store_outage_past_the_delivery_limit_dead_letters_no_job(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DELIVERY_LIMIT_ENV, str(LIMIT))  # every process of the fleet declares it
    fleet = make_fleet(
        workers_per_region=2,
        model_dir=standin(2.0),
        broker="rabbitmq",
        worker_env={"ANIMFLEET_WORKER_STORE_RETRY_S": "1"},  # a delivery a second per worker
    )
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    running_on(fleet, jobs[0])  # two running, two on the quorum queue

    fleet.stop_process("redis")  # the store; the broker stays up and keeps delivering

    def past_the_limit() -> bool:
        return sum(n > LIMIT for n in handed_back(fleet).values()) >= 2

    wait_until(past_the_limit, f"two jobs delivered more than {LIMIT} times", timeout=120)
    fleet.restart_redis()  # started again, same data
    back = time.monotonic()

    def moving() -> bool:
        return any(record_of(fleet, job).status is not JobState.QUEUED for job in jobs[2:])

    wait_until(moving, "a job that waited on the queue running again", timeout=60)
    recovered_s = time.monotonic() - back
    records = settle(fleet, jobs, timeout=120)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), {
        j: (r.status.value, r.error) for j, r in records.items()
    }
    report_case(f"store down past {LIMIT} redeliveries (RabbitMQ)", fleet, records, recovered_s)
