"""The region's RabbitMQ node (quorum queues) is killed mid-job and started again: every job
accepted before, during and after still ends, once; a duplicate delivery runs nothing twice."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from animfleet.jobs import JobState
from animfleet.region.broker import BrokerLink
from animfleet.region.messages import AnimateMessages
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from launcher.local_rabbitmq import rabbitmq_available
from tests.faults.conftest import record_of, report_case, running_on, settle, standin, wait_until

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not rabbitmq_available(), reason="rabbitmq-server is not installed"),
]


def test_rabbitmq_killed_mid_job_and_restarted_loses_nothing(
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    fleet = make_fleet(workers_per_region=2, model_dir=standin(3.0), broker="rabbitmq")
    client = make_client(fleet)
    jobs = [client.submit(make_image(seed=i), "pan left").id for i in range(4)]
    running_on(fleet, jobs[0])  # two running (mid-job), two queued on the quorum queue

    fleet.kill_process("rabbitmq")  # SIGKILL: no flush, no goodbye to its clients
    # Accepted while the broker is down: the store holds them, the outbox their messages.
    jobs += [client.submit(make_image(seed=10 + i), "pan left").id for i in range(2)]
    fleet.restart_rabbitmq()

    records = settle(fleet, jobs, timeout=180)
    assert all(r.status is JobState.SUCCEEDED for r in records.values()), {
        j: (r.status.value, r.error) for j, r in records.items()
    }
    report_case("RabbitMQ node killed mid-job", fleet, records, recovered_s=None)


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_message_published_twice_runs_its_job_once(
    broker: str,
    make_fleet: Callable[..., LocalFleet],
    make_client: Callable[[LocalFleet], Client],
    make_image: Callable[..., bytes],
) -> None:
    # What the outbox's relay does when a publisher died after its publish, before its
    # removal: the job's message reaches the queue again while the job runs.
    fleet = make_fleet(workers_per_region=2, model_dir=standin(4.0, jitter=0.0), broker=broker)
    client = make_client(fleet)
    job = client.submit(make_image(), "pan left").id
    running_on(fleet, job)
    region = fleet.topology.region("fa")
    link = BrokerLink(region)
    link.publish(region.queue, AnimateMessages(region).build(job))
    link.close()
    wait_until(lambda: "job.delivery_deferred" in _logs(fleet), "the duplicate deferred")

    records = settle(fleet, [job], timeout=120)
    assert records[job].status is JobState.SUCCEEDED
    assert record_of(fleet, job).attempts == 1  # the duplicate started no second run
    report_case(f"duplicate delivery ({broker})", fleet, records, recovered_s=None)


def _logs(fleet: LocalFleet) -> str:
    return "".join(path.read_text() for path in (fleet.root / "logs").glob("worker-*.log"))
