"""The webhook outbox of a region: which state changes produce an event, the deliveries, and
their schedule.

An event is written in the same Redis transaction as the state change that causes it (see
:meth:`animfleet.region.jobstore.JobStore.update`), so no change is ever published without its
event or the other way round, and a GPU worker pays only a few extra Redis commands for it. The
webhooks process (``workers/webhooks``) moves due deliveries from the ``webhook-due`` sorted set
onto its own Celery queue; nothing lives only in memory.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

import redis
from pydantic import BaseModel

from animfleet.jobs import JobRecord, JobState
from animfleet.region.keys import (
    JOB_KEY,
    WEBHOOK_DELIVERY_KEY,
    WEBHOOK_DUE_SET,
    WEBHOOK_JOB_KEY,
    WEBHOOKS_ALIVE_KEY,
)

EventType = Literal["job.started", "job.progress", "job.completed", "job.deleted"]
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


def emit_deleted(client: redis.Redis, record: JobRecord, region: str, at: float) -> None:
    """Queue ``job.deleted`` for ``record``'s webhook (if it has a live one), erased at ``at``:
    the job as it was, without its output, which is gone. Every subscriber gets it, whatever
    events it chose: an erasure is the job's last word."""
    if not record.webhook_url or record.webhook_disabled:
        return
    delivery = WebhookDelivery(
        id=webhook_id(record.id, "job.deleted", 0),
        job_id=record.id,
        region=region,
        type="job.deleted",
        url=record.webhook_url,
        data=record.model_copy(update={"output": None}).model_dump(mode="json"),
        created_at=at,
    )
    with client.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, delivery, at)
        pipe.execute()


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
    if not delivery.data:  # settled: sent again with the record as it is now
        record = client.get(JOB_KEY + job_id)
        if record is None:
            return None
        delivery.data = JobRecord.model_validate_json(record).model_dump(mode="json")
    delivery.attempt, delivery.state = 0, "pending"
    with client.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, delivery, time.time())
        pipe.execute()
    return delivery


def load_delivery(client: redis.Redis, delivery_id: str) -> WebhookDelivery | None:
    raw = client.get(WEBHOOK_DELIVERY_KEY + delivery_id)
    return None if raw is None else WebhookDelivery.model_validate_json(raw)


def save_delivery(client: redis.Redis, delivery: WebhookDelivery) -> None:
    """Write ``delivery`` back; once it is settled, keep only what a replay needs.

    A settled delivery no longer needs its copy of the job record (a replay renders the record
    as it is then), and only the job's last event can be replayed: the others are deleted.
    """
    if delivery.state == "pending":
        client.set(delivery.key, delivery.model_dump_json(), ex=DELIVERY_TTL_S)
        return
    listing = WEBHOOK_JOB_KEY + delivery.job_id
    ids = [_text(raw) for raw in client.lrange(listing, 0, -1)]
    with client.pipeline(transaction=False) as pipe:
        settled = delivery.model_copy(update={"data": {}})
        pipe.set(delivery.key, settled.model_dump_json(), ex=DELIVERY_TTL_S)
        for earlier in ids[:-1]:
            raw = client.get(WEBHOOK_DELIVERY_KEY + earlier)
            if raw is not None and WebhookDelivery.model_validate_json(raw).state != "pending":
                pipe.delete(WEBHOOK_DELIVERY_KEY + earlier)
                pipe.lrem(listing, 0, earlier)
        pipe.execute()


def mark_sender_alive(client: redis.Redis, region: str, for_s: float) -> None:
    """The region's webhook scheduler ran just now (read by :func:`sender_alive`)."""
    client.set(WEBHOOKS_ALIVE_KEY + region, time.time(), px=int(for_s * 1000))


def sender_alive(client: redis.Redis, region: str) -> bool:
    return bool(client.exists(WEBHOOKS_ALIVE_KEY + region))


def forget_sender(client: redis.Redis, region: str) -> None:
    """Clear the mark, so that :func:`sender_alive` waits for a scheduler's next run."""
    client.delete(WEBHOOKS_ALIVE_KEY + region)


# -- the schedule of deliveries ----------------------------------------------------------------
# The durable schedule of webhook deliveries: a sorted set per region, delivery id -> due time.
#
# Nothing is kept only in memory and no Celery ETA is used (kombu #337: an ETA near the Redis
# visibility timeout gets a message delivered twice, and a long ETA is held in a worker's memory).
# The webhooks process claims due deliveries by moving their score forward by a lease and
# publishes one task per claim; the task finishes by rescheduling or removing the delivery, but
# only while it still holds that lease. If the process dies anywhere in between, the lease runs
# out and the delivery is claimed again: at-least-once, de-duplicated by ``webhook-id``.

# Claim up to ARGV[3] members due by ARGV[1]; each is re-scored to ARGV[2] (the lease end).
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], member)
end
return due
"""

# Reschedule (ARGV[3] = new due time) or remove (ARGV[3] = '') a member if it still has the
# lease ARGV[2]; returns 1 if it did.
_SETTLE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or math.abs(tonumber(score) - tonumber(ARGV[2])) > 0.0005 then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""


class DueSet:
    """The deliveries of one region that are due or will be."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.key = client, WEBHOOK_DUE_SET + region
        self._claim = client.register_script(_CLAIM)
        self._settle = client.register_script(_SETTLE)

    def claim(self, now: float, lease_until: float, limit: int = 100) -> list[str]:
        """Ids of deliveries due by ``now``, each now leased until ``lease_until``."""
        lease = _score(lease_until)
        raw = self._claim(keys=[self.key], args=[now, lease, limit])
        return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]

    def holds(self, delivery_id: str, lease_until: float) -> bool:
        score = self.redis.zscore(self.key, delivery_id)
        return score is not None and abs(score - float(_score(lease_until))) <= 0.0005

    def reschedule(self, delivery_id: str, lease_until: float, due: float) -> bool:
        return bool(self._settle(keys=[self.key], args=[delivery_id, _score(lease_until), due]))

    def remove(self, delivery_id: str, lease_until: float) -> bool:
        return bool(self._settle(keys=[self.key], args=[delivery_id, _score(lease_until), ""]))

    def pending(self) -> int:
        return int(self.redis.zcard(self.key))


def _score(value: float) -> str:
    """Scores as fixed strings, so the task compares exactly what was written."""
    return f"{value:.3f}"


def deliveries_of(client: redis.Redis | redis.client.Pipeline, job_id: str) -> list[str]:
    """Ids of ``job_id``'s deliveries still kept (read before a transaction's MULTI)."""
    return [_text(raw) for raw in client.lrange(WEBHOOK_JOB_KEY + job_id, 0, -1)]


def any_pending(client: redis.Redis | redis.client.Pipeline, delivery_ids: list[str]) -> bool:
    for delivery_id in delivery_ids:
        delivery = load_delivery(client, delivery_id)
        if delivery is not None and delivery.state == "pending":
            return True
    return False


def forget(pipe: redis.client.Pipeline, job_id: str, delivery_ids: list[str]) -> None:
    """Inside the caller's transaction: drop what is kept of ``job_id``'s webhook events (its
    record is leaving Redis for the archive; a replay then answers that there is none)."""
    pipe.delete(WEBHOOK_JOB_KEY + job_id, *(WEBHOOK_DELIVERY_KEY + i for i in delivery_ids))


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
