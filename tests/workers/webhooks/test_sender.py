"""One delivery attempt at a time, on a real Redis, to a real receiver on loopback."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState
from animfleet.netguard import NetGuard
from animfleet.region import outbox
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.region.outbox import DueSet
from workers.webhooks.sender import Sender
from workers.webhooks.settings import WebhookSettings

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)


@pytest.fixture
def answers() -> Iterator[tuple[list[tuple[int, dict[str, str]]], str]]:
    """A receiver answering from a script (then 200); yields (script, url)."""
    script: list[tuple[int, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            status, extra = script.pop(0) if script else (200, {})
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield script, f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def make_sender(client: redis.Redis, schedule: tuple[float, ...]) -> Sender:
    store = JobStore(client)
    return Sender(
        store=store,
        due=DueSet(client, "r1"),
        settings=WebhookSettings(secrets=(SECRET,), schedule_s=schedule, jitter=0),  # type: ignore[arg-type]
        netguard=NetGuard(allow_loopback=True),
    )


def finished_job(store: JobStore, url: str) -> str:
    """A job whose completion queued one ``job.completed`` delivery."""
    record = JobRecord(
        id="r1.abc",
        region="r1",
        home_region="r1",
        params=PARAMS,
        webhook_url=url,
        webhook_events=["completed"],
    )
    seed(store.redis, record, b"image")
    store.update(record.id, lambda r: r.end(JobState.CANCELED, "canceled", "by test"))
    return record.id


def claim(sender: Sender) -> tuple[str, float]:
    lease = time.time() + 60
    (delivery_id,) = sender.due.claim(time.time() + 1000, lease)
    return delivery_id, lease


def test_retry_then_delivered_records_every_attempt(
    redis_client: redis.Redis, answers: Any
) -> None:
    script, url = answers
    script.append((500, {}))
    sender = make_sender(redis_client, (0, 10, 10))
    job_id = finished_job(sender.store, url)
    delivery_id, lease = claim(sender)
    assert sender.deliver(delivery_id, lease) == "pending"
    due = redis_client.zscore(sender.due.key, delivery_id)
    assert due is not None and 9 < due - time.time() <= 10  # the schedule's next delay
    delivery_id, lease = claim(sender)
    assert sender.deliver(delivery_id, lease) == "delivered"
    assert sender.due.pending() == 0
    outcomes = [(a.status_code, a.outcome) for a in sender.store.get(job_id).webhook_attempts]
    assert outcomes == [(500, "retry"), (200, "delivered")]


def test_retry_after_410_and_giving_up(redis_client: redis.Redis, answers: Any) -> None:
    script, url = answers
    script.extend([(429, {"Retry-After": "120"}), (410, {})])
    sender = make_sender(redis_client, (0, 1, 1))
    job_id = finished_job(sender.store, url)
    delivery_id, lease = claim(sender)
    sender.deliver(delivery_id, lease)
    due = redis_client.zscore(sender.due.key, delivery_id)
    assert due is not None and due - time.time() > 110  # Retry-After beats the 1 s schedule
    delivery_id, lease = claim(sender)
    assert sender.deliver(delivery_id, lease) == "stopped"
    assert sender.due.pending() == 0 and sender.store.get(job_id).webhook_disabled


def test_gives_up_after_the_last_scheduled_attempt(redis_client: redis.Redis) -> None:
    sender = make_sender(redis_client, (0,))
    finished_job(sender.store, "http://127.0.0.1:9/closed")
    delivery_id, lease = claim(sender)
    assert sender.deliver(delivery_id, lease) == "gave_up"
    assert sender.due.pending() == 0


def test_a_stale_lease_does_nothing(redis_client: redis.Redis, answers: Any) -> None:
    _, url = answers
    sender = make_sender(redis_client, (0, 1))
    job_id = finished_job(sender.store, url)
    delivery_id, lease = claim(sender)
    claim_again = sender.due.claim(time.time() + 1000, lease + 5)  # the lease ran out: reclaimed
    assert claim_again == [delivery_id]
    assert sender.deliver(delivery_id, lease) is None
    assert sender.store.get(job_id).webhook_attempts == []


def test_events_follow_the_filter_and_progress_is_throttled() -> None:
    before = JobRecord(id="r.1", region="r", home_region="r", params=PARAMS, webhook_url="http://x")
    before.transition(JobState.RUNNING)
    after = before.model_copy(deep=True)
    after.progress.step, after.progress.total = 1, 8
    assert outbox.events_for(before, after, 100.0) == [("job.progress", 10_001)]
    again = after.model_copy(deep=True)
    again.progress.step = 2
    assert outbox.events_for(after, again, 100.5) == []  # within the throttle interval
    again.progress.step = 8
    assert outbox.events_for(after, again, 100.6) == [("job.progress", 10_008)]  # the last step
    after.webhook_events = ["completed"]
    assert outbox.events_for(before, after, 200.0) == []
