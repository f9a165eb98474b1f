"""The Celery message of ``animate(job_id)`` for a region's GPU queue, as text to push.

Admission and requeues push it inside their own atomic Redis calls (a Lua script, a MULTI), so
a record never waits without its message or the reverse. It is built by Celery and kombu exactly
as ``send_task(..., queue=<region queue>)`` would build it; only the final ``LPUSH`` moves. A
region whose broker is not a Redis gets the same text (kombu's in-memory transport builds it),
which :class:`animfleet.region.broker.BrokerLink` publishes as an AMQP message.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any

from celery import Celery
from kombu.serialization import dumps as serialize
from kombu.utils.json import dumps as kombu_dumps

from animfleet.constants import ANIMATE_TASK
from animfleet.topology import Region

# Stands for the job id in the message template; job ids are [A-Za-z0-9._-], never this.
_PLACEHOLDER = "animfleet-job-id-placeholder"


class AnimateMessages:
    """Builds the messages of one region's ``animate.<region>`` queue."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self.celery = Celery(f"animfleet-messages-{region.name}")
        self.celery.conf.update(
            broker_url=region.broker_url if region.broker_url.startswith("redis") else "memory://",
            task_serializer="json",
            accept_content=["json"],
            task_ignore_result=True,
        )
        self._channel: Any = None
        self._template: _Template | None = None

    def build(self, job_id: str, retries: int = 0) -> str:
        """The Celery protocol-2 message for ``animate(job_id)``, as kombu's Redis transport
        would push it for ``send_task(..., queue=<region queue>)``; ``retries``: as a deferred
        delivery counts its deferrals."""
        if self._channel is None:
            self._channel = self.celery.connection_for_write().default_channel
        headers, properties, body, _ = self.celery.amqp.as_task_v2(
            job_id, ANIMATE_TASK, args=[job_id], kwargs={}, ignore_result=True, retries=retries
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

    def for_job(self, job_id: str) -> str:
        """:meth:`build` for ``job_id``, from a template kombu built once.

        Only the job id (in headers, properties and the base64 body) and the delivery tag
        differ between two messages: the template's fixed pieces are joined around them.
        """
        if self._template is None:
            self._template = _Template(self.build(_PLACEHOLDER))
        return self._template.fill(job_id)


class _Template:
    """A message cut at what varies: the base64 body, the delivery tag and the job id."""

    def __init__(self, text: str) -> None:
        document = json.loads(text)
        body, tag = document["body"], document["properties"]["delivery_tag"]
        self.body_head, self.body_tail = base64.b64decode(body).decode().split(_PLACEHOLDER)
        # The fixed pieces, with what goes between each and the next: the body (once), the
        # tag (once) or the job id (wherever kombu wrote it in the headers and properties).
        parts = re.split(f"({re.escape(body)}|{re.escape(tag)}|{_PLACEHOLDER})", text)
        self.fixed = parts[0::2]
        self.slots = [{body: _BODY, tag: _TAG}.get(slot, _JOB_ID) for slot in parts[1::2]]

    def fill(self, job_id: str) -> str:
        body = base64.b64encode(f"{self.body_head}{job_id}{self.body_tail}".encode()).decode()
        values = {_BODY: body, _TAG: delivery_tag(), _JOB_ID: job_id}
        pieces = [self.fixed[0]]
        for slot, fixed in zip(self.slots, self.fixed[1:], strict=True):
            pieces += (values[slot], fixed)
        return "".join(pieces)


_BODY, _TAG, _JOB_ID = range(3)


def delivery_tag() -> str:
    """A random (version 4) UUID as text, as kombu tags a message, without building a UUID."""
    digits = os.urandom(16).hex()
    variant = "89ab"[int(digits[16], 16) & 3]
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"
