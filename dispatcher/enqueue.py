"""The Celery message of a job, handed to the region's admission script.

One Lua script per submit (:meth:`animfleet.region.jobstore.JobStore.admit`) checks the
region's admission limit, stores the record and the input and pushes this message, so two
dispatchers can never overfill a region between them, and a record never exists without its
message (or the reverse). The message is built by Celery and kombu, exactly as ``send_task``
would build it; only the final ``LPUSH`` moves into the script.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Celery
from kombu.serialization import dumps as serialize
from kombu.utils.json import dumps as kombu_dumps

from animfleet.constants import ANIMATE_TASK
from animfleet.jobs import JobRecord
from animfleet.region.jobstore import Admission, JobStore
from animfleet.topology import Region

# Stands for the job id in the message template; job ids are [A-Za-z0-9._-], never this.
_PLACEHOLDER = "animfleet-job-id-placeholder"


class RegionQueue:
    """A dispatcher's handle on one region: admission, record and Celery message, atomically."""

    def __init__(self, region: Region, store: JobStore, allowance: float) -> None:
        self.region, self.store, self.allowance = region, store, allowance
        self.celery = Celery(f"animfleet-dispatch-{region.name}")
        self.celery.conf.update(
            broker_url=region.broker_url,
            task_serializer="json",
            accept_content=["json"],
            task_ignore_result=True,
        )
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
        return self.store.admit(
            record,
            image,
            message=self._message(record.id),
            queue=self.region.queue,
            allowance=self.allowance,
            idempotency=idempotency,
            idempotency_entry=idempotency_entry,
        )
