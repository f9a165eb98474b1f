"""Webhook events: which state changes produce one, and the durable outbox they are written to.

An event is written in the same Redis transaction as the state change that causes it (see
:meth:`animfleet.region.jobstore.JobStore.update`), so no change is ever published without its
event or the other way round, and a GPU worker pays only a few extra Redis commands for it. The
webhooks process (``workers/webhooks``) moves due deliveries from the per-region ``webhook-due`` sorted set
onto its own Celery queue; nothing lives only in memory.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

import redis
from pydantic import BaseModel

from animfleet.constants import WEBHOOK_DELIVERY_KEY, WEBHOOK_DUE_SET, WEBHOOK_JOB_KEY
from animfleet.jobs import JobRecord, JobState

EventType = Literal["job.started", "job.progress", "job.completed"]
DeliveryState = Literal["pending", "delivered", "stopped", "gave_up"]

# Progress events are throttled: at most one per interval, plus the last step.
PROGRESS_EVENT_INTERVAL_S = 1.0
DELIVERY_TTL_S = 8 * 24 * 3600  # longer than the longest retry schedule


class WebhookDelivery(BaseModel):
    """One event for one endpoint, and how far its delivery got."""

    id: str  # the ``webhook-id`` header: stable per event, so receivers can de-duplicate
    job_id: str
    region: str
    type: EventType
    url: str
    data: dict[str, Any]  # the job record when the event happened
    created_at: float
    attempt: int = 0  # attempts made so far
    state: DeliveryState = "pending"

    @property
    def key(self) -> str:
        return WEBHOOK_DELIVERY_KEY + self.id


def webhook_id(job_id: str, kind: EventType, sequence: int) -> str:
    """A deterministic id: a retried transaction rewrites the same event instead of a new one."""
    digest = hashlib.sha256(f"{job_id}:{kind}:{sequence}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


def events_for(before: JobRecord, after: JobRecord, now: float) -> list[tuple[EventType, int]]:
    """The events (type, sequence) that the change ``before -> after`` produces for its webhook."""
    if not after.webhook_url or after.webhook_disabled:
        return []
    wanted = set(after.webhook_events)
    events: list[tuple[EventType, int]] = []
    if after.status is JobState.RUNNING and before.status is JobState.QUEUED:
        if "start" in wanted:
            events.append(("job.started", after.attempts))
    elif after.status.terminal and not before.status.terminal:
        if "completed" in wanted:
            events.append(("job.completed", 0))
    elif (
        "progress" in wanted
        and after.status is JobState.RUNNING
        and after.progress.step != before.progress.step
        and after.progress.step > 0
    ):
        last = after.webhook_progress_at or 0.0
        if after.progress.step == after.progress.total or now - last >= PROGRESS_EVENT_INTERVAL_S:
            after.webhook_progress_at = now
            events.append(("job.progress", after.attempts * 10_000 + after.progress.step))
    return events


def queue_delivery(pipe: redis.client.Pipeline, delivery: WebhookDelivery, due: float) -> None:
    """Write ``delivery``, due at ``due`` (unix time), inside the caller's transaction."""
    pipe.set(delivery.key, delivery.model_dump_json(), ex=DELIVERY_TTL_S)
    pipe.zadd(WEBHOOK_DUE_SET + delivery.region, {delivery.id: due})


def emit(pipe: redis.client.Pipeline, before: JobRecord, after: JobRecord) -> None:
    """Queue the webhook events of the change ``before -> after`` in the caller's transaction."""
    now = time.time()
    for kind, sequence in events_for(before, after, now):
        assert after.webhook_url is not None
        delivery = WebhookDelivery(
            id=webhook_id(after.id, kind, sequence),
            job_id=after.id,
            region=after.region,
            type=kind,
            url=after.webhook_url,
            data=after.model_dump(mode="json"),
            created_at=now,
        )
        queue_delivery(pipe, delivery, now)
        pipe.rpush(WEBHOOK_JOB_KEY + after.id, delivery.id)
        pipe.expire(WEBHOOK_JOB_KEY + after.id, DELIVERY_TTL_S)


def replay_last(client: redis.Redis, job_id: str) -> WebhookDelivery | None:
    """Send ``job_id``'s most recent event again, now, with the same ``webhook-id``.

    Returns the delivery, or ``None`` if the job never produced an event.
    """
    raw_id = client.lindex(WEBHOOK_JOB_KEY + job_id, -1)
    raw = client.get(WEBHOOK_DELIVERY_KEY + raw_id.decode()) if isinstance(raw_id, bytes) else None
    if raw is None:
        return None
    delivery = WebhookDelivery.model_validate_json(raw)
    delivery.attempt, delivery.state = 0, "pending"
    with client.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, delivery, time.time())
        pipe.execute()
    return delivery
