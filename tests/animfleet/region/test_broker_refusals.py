"""What RabbitMQ refuses or returns reaches the outbox (a real node, a real Redis store): an
unroutable publish raises instead of being confirmed and dropped, a refusal for good sets its
entry aside, and the dead-letter queue is a plain queue that dead-letters nothing itself."""

from __future__ import annotations

import itertools
import time

import pytest
import redis
from kombu import Connection, Queue

from animfleet.region.broker import (
    DELIVERY_LIMIT,
    DELIVERY_LIMIT_ENV,
    BrokerLink,
    BrokerUnavailable,
    dead_letter_queue,
    delivery_limit,
    region_queue,
)
from animfleet.region.broker_outbox import BrokerOutbox, entry
from animfleet.region.jobstore import JobStore
from animfleet.region.messages import AnimateMessages
from animfleet.topology import Region
from launcher.local_fleet import LocalFleet

_names = itertools.count()


@pytest.fixture
def region(servers: LocalFleet, rabbitmq: LocalFleet) -> Region:
    return Region(
        name=f"br{next(_names)}-{time.monotonic_ns()}",
        broker_url=rabbitmq.broker_url("rq"),
        store_url=f"redis://127.0.0.1:{servers.redis_port}/15",
    )


def test_a_publish_to_a_deleted_queue_raises_and_the_next_declares_it(region: Region) -> None:
    link = BrokerLink(region)
    message = AnimateMessages(region).for_job("br-1")
    link.publish(region.queue, message)  # declares the queue (once per connection)
    with Connection(region.broker_url) as connection:
        region_queue(region, region.queue).bind(connection.default_channel).delete()
    with pytest.raises(BrokerUnavailable, match="returned unroutable"):
        link.publish(region.queue, message)  # not confirmed-and-dropped
    link.publish(region.queue, message)
    assert link.depth(region.queue) == 1
    link.close()


def test_an_entry_the_broker_refuses_for_good_is_quarantined_not_retried(
    redis_client: redis.Redis, region: Region
) -> None:
    outbox = BrokerOutbox(JobStore(redis_client), region)
    clash = f"{region.queue}.clash"
    with Connection(region.broker_url) as connection:  # the same name, other arguments
        Queue(clash, durable=True).bind(connection.default_channel).declare()
    good = entry(region.queue, AnimateMessages(region).for_job("br-good"))
    refused = entry(clash, AnimateMessages(region).for_job("br-refused"))
    redis_client.zadd(outbox.key, {refused: time.time() - 120, good: time.time() - 60})
    assert outbox.overdue_s() >= 120

    assert outbox.relay() == 1  # the refused entry set aside, the next one published
    assert outbox.pending() == 0 and outbox.quarantined() == 1
    assert outbox.overdue_s() == 0
    assert outbox.link.depth(region.queue) == 1

    assert outbox.release_quarantined() == 1  # the operator fixed the cause
    assert outbox.pending() == 1 and outbox.quarantined() == 0
    outbox.link.close()


def test_the_dead_letter_queue_keeps_a_message_however_often_it_is_returned(
    region: Region,
) -> None:
    link = BrokerLink(region)
    dead = dead_letter_queue(region)
    link.publish(dead, AnimateMessages(region).for_job("br-dead"))
    with Connection(region.broker_url) as connection:
        queue = region_queue(region, dead).bind(connection.default_channel)
        for _ in range(DELIVERY_LIMIT + 2):  # past the work queues' limit
            message = queue.get(no_ack=False)
            assert message is not None, "the dead-letter queue dropped or moved its message"
            message.requeue()
        kept = queue.get(no_ack=False)
        assert kept is not None and kept.headers["id"] == "br-dead"
        kept.ack()
    link.close()


def test_a_bad_delivery_limit_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DELIVERY_LIMIT_ENV, "zero")
    with pytest.raises(ValueError, match=f"{DELIVERY_LIMIT_ENV} must be .* got 'zero'"):
        delivery_limit()
