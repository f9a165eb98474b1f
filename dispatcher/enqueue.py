"""Admit, record and enqueue a job in one atomic Redis call.

One Lua script per submit does what would otherwise be three round trips and a race: it checks
the region's admission limit (queued + running below one per live GPU plus an allowance, counted
from the heartbeat sets), stores the record and the input, and pushes the Celery message. Two
dispatchers can therefore never overfill a region between them, and a record never exists
without its message (or the reverse).

The message itself is built by Celery and kombu, exactly as ``send_task`` would build it; only
the final ``LPUSH`` moves into the script.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery
from kombu.serialization import dumps as serialize
from kombu.utils.json import dumps as kombu_dumps

from animfleet.constants import (
    ANIMATE_TASK,
    BUSY_SET,
    HOLDING_SET,
    INPUT_KEY,
    INPUT_TTL_S,
    JOB_KEY,
    QUEUED_SET,
    RECORD_TTL_S,
    START_BY_SET,
    WORKER_SET,
)
from animfleet.jobs import JobRecord
from animfleet.topology import Region

ADMITTED, FULL, EXISTS, REPEAT = 1, 0, -1, 2
# Stands for the job id in the message template; job ids are [A-Za-z0-9._-], never this.
_PLACEHOLDER = "animfleet-job-id-placeholder"

# KEYS: workers, busy, queued, start-by, record, input, queue list, holding set of the job's
#       home region, idempotency keys...
# ARGV: now, allowance, record json, image, record ttl, input ttl, job id, created at,
#       start-by (or ""), message, idempotency entry, one ttl per idempotency key
# An idempotency key bound already wins over everything: the caller gets the earlier job.
# The holding set lets the router count, per home region, the jobs held anywhere: its demand.
_ADMIT_SCRIPT = """
for i = 9, #KEYS do
  local earlier = redis.call('GET', KEYS[i])
  if earlier then return {2, 0, 0, earlier, i - 8} end
end
local now = tonumber(ARGV[1])
local live = redis.call('ZCOUNT', KEYS[1], now, '+inf')
local busy = redis.call('ZCOUNT', KEYS[2], now, '+inf')
local held = busy + redis.call('ZCARD', KEYS[3])
if held >= math.floor(live * (1 + tonumber(ARGV[2])) + 1e-9) then
  return {0, live, held}
end
if not redis.call('SET', KEYS[5], ARGV[3], 'EX', ARGV[5], 'NX') then
  return {-1, live, held}
end
redis.call('SET', KEYS[6], ARGV[4], 'EX', ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
if ARGV[9] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[9], ARGV[7])
end
redis.call('LPUSH', KEYS[7], ARGV[10])
redis.call('ZADD', KEYS[8], ARGV[8], ARGV[7])
for i = 9, #KEYS do
  redis.call('SET', KEYS[i], ARGV[11], 'EX', ARGV[i + 3])
end
return {1, live, held + 1}
"""


@dataclass(frozen=True)
class Admission:
    """What the script answered: ``outcome`` is ADMITTED, FULL, EXISTS or REPEAT (then
    ``earlier`` holds the idempotency entry bound before)."""

    outcome: int
    live_workers: int
    held: int
    earlier: bytes | None = None
    matched: int = 0  # which idempotency key (1-based) was bound already


class RegionQueue:
    """A dispatcher's handle on one region: admission, record and Celery message, atomically."""

    def __init__(self, region: Region, client: redis.Redis, allowance: float) -> None:
        self.region, self.client, self.allowance = region, client, allowance
        self.celery = Celery(f"animfleet-dispatch-{region.name}")
        self.celery.conf.update(
            broker_url=region.broker_url,
            task_serializer="json",
            accept_content=["json"],
            task_ignore_result=True,
        )
        self._script = client.register_script(_ADMIT_SCRIPT)
        name = region.name  # the region's own keys, the same for every job
        self._region_keys = (WORKER_SET + name, BUSY_SET + name, QUEUED_SET + name)
        self._start_by_key = START_BY_SET + name
        self._channel: Any = None
        self._template: tuple[str, str, str, str] | None = None

    def _build_message(self, job_id: str) -> str:
        """The Celery protocol-2 message for ``animate(job_id)``, as kombu's Redis transport
        would push it for ``send_task(..., queue=<region queue>)``."""
        if self._channel is None:
            self._channel = self.celery.connection_for_write().default_channel
        headers, properties, body, _ = self.celery.amqp.as_task_v2(
            job_id, ANIMATE_TASK, args=[job_id], kwargs={}, ignore_result=True
        )
        content_type, encoding, data = serialize(body, serializer="json")
        properties = {**properties, "delivery_mode": 2}
        message = self._channel.prepare_message(
            data, 0, content_type, encoding, headers, properties
        )
        # The anonymous exchange: the routing key names the queue, as send_task(queue=...) does.
        self._channel._inplace_augment_message(message, "", self.region.queue)
        text: str = kombu_dumps(message)
        return text

    def _message(self, job_id: str) -> str:
        """:meth:`_build_message` for ``job_id``, from a template kombu built once.

        Only the job id (in headers, properties and the base64 body) and the delivery tag
        differ between two messages; filling them in costs a fraction of building anew.
        """
        if self._template is None:
            text = self._build_message(_PLACEHOLDER)
            document = json.loads(text)
            body = base64.b64decode(document["body"]).decode()
            self._template = (text, document["body"], document["properties"]["delivery_tag"], body)
        text, encoded_body, tag, body = self._template
        fresh_body = base64.b64encode(body.replace(_PLACEHOLDER, job_id).encode()).decode()
        return (
            text.replace(encoded_body, fresh_body)
            .replace(tag, str(uuid.uuid4()))
            .replace(_PLACEHOLDER, job_id)
        )

    def admit(
        self,
        record: JobRecord,
        image: bytes,
        idempotency: Sequence[tuple[str, int]] = (),
        idempotency_entry: str = "",
    ) -> Admission:
        """Try to take ``record`` into this region now.

        ``idempotency`` lists (Redis key, ttl) pairs to bind to ``idempotency_entry`` on
        admission; if one is bound already nothing is written and the outcome is REPEAT.
        """
        limits = [t for t in (record.start_deadline, record.deadline) if t is not None]
        keys = [
            *self._region_keys,
            self._start_by_key,
            JOB_KEY + record.id,
            INPUT_KEY + record.id,
            self.region.queue,
            HOLDING_SET + record.home_region,
            *(key for key, _ in idempotency),
        ]
        args: list[Any] = [
            repr(time.time()),
            repr(self.allowance),
            record.model_dump_json(),
            image,
            RECORD_TTL_S,
            INPUT_TTL_S,
            record.id,
            repr(record.created_at),
            repr(min(limits)) if limits else "",
            self._message(record.id),
            idempotency_entry,
            *(ttl for _, ttl in idempotency),
        ]
        answer = self._script(keys=keys, args=args)
        if int(answer[0]) == REPEAT:
            return Admission(REPEAT, 0, 0, earlier=answer[3], matched=int(answer[4]))
        return Admission(int(answer[0]), int(answer[1]), int(answer[2]))
