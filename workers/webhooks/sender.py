"""One delivery attempt of one webhook event, and what follows from its answer."""

from __future__ import annotations

import contextlib
import json
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import structlog

from animfleet.jobs import JobRecord, WebhookAttempt
from animfleet.jobview import job_view
from animfleet.netguard import BlockedURL, FetchFailed, NetGuard
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.outbox import (
    DeliveryState,
    DueSet,
    WebhookDelivery,
    load_delivery,
    save_delivery,
)
from animfleet.region.tenants import Tenants
from storage import ObjectStore
from workers.metrics import WEBHOOK_DELIVERIES
from workers.webhooks.settings import WebhookSettings
from workers.webhooks.signing import secret_key, sign

log = structlog.stdlib.get_logger("animfleet.webhooks")

MAX_RESPONSE_BYTES = 64 * 1024  # receivers' answers are read (bounded) and ignored


@dataclass
class Sender:
    """Delivers the events of one region; one per webhooks process."""

    store: JobStore
    due: DueSet
    settings: WebhookSettings
    netguard: NetGuard
    objects: ObjectStore | None = None
    presign_expiry_s: int = 3600
    rng: random.Random = random.Random()  # noqa: RUF009 - shared on purpose; jitter only

    def deliver(self, delivery_id: str, lease_until: float) -> DeliveryState | None:
        """Make one attempt if this call still holds the lease; returns the delivery's state."""
        if not self.due.holds(delivery_id, lease_until):
            return None  # settled already, or claimed again after the lease ran out
        delivery = load_delivery(self.store.redis, delivery_id)
        if delivery is None:
            self.due.remove(delivery_id, lease_until)
            return None
        delivery.attempt += 1
        bound = log.bind(
            job_id=delivery.job_id,
            webhook_id=delivery.id,
            type=delivery.type,
            attempt=delivery.attempt,
        )
        attempt, retry_after = self._attempt(delivery)
        last = delivery.attempt >= len(self.settings.schedule_s)
        if attempt.outcome == "retry" and last:
            attempt.outcome = "gave_up"
        delivery.state = {
            "delivered": "delivered",
            "stopped": "stopped",
            "refused": "gave_up",
            "gave_up": "gave_up",
        }.get(attempt.outcome, "pending")  # type: ignore[assignment]
        save_delivery(self.store.redis, delivery)
        self._record(delivery.job_id, attempt)
        WEBHOOK_DELIVERIES.labels(delivery.region, attempt.outcome).inc()
        if delivery.state == "pending":
            delay = self._next_delay(delivery.attempt, retry_after)
            self.due.reschedule(delivery.id, lease_until, time.time() + delay)
            bound.info("webhook.retry_scheduled", status_code=attempt.status_code, delay_s=delay)
        else:
            self.due.remove(delivery.id, lease_until)
            bound.info("webhook." + delivery.state, status_code=attempt.status_code)
        return delivery.state

    def _keys(self, tenant: str) -> list[bytes]:
        """The tenant's own signing secrets (two while it rotates), else the region's."""
        own = Tenants(self.store.redis).webhook_secrets(tenant)
        return [secret_key(secret) for secret in own] if own else self.settings.keys

    def _attempt(self, delivery: WebhookDelivery) -> tuple[WebhookAttempt, float | None]:
        # A settled delivery keeps no copy of the record; one replayed while its earlier attempt
        # settled may have lost it: send the record as it is now.
        record = (
            JobRecord.model_validate(delivery.data)
            if delivery.data
            else self.store.get(delivery.job_id)
        )
        view = job_view(record, objects=self.objects, presign_expiry_s=self.presign_expiry_s)
        now = time.time()
        payload = {
            "type": delivery.type,
            # Standard Webhooks' payload timestamp: when the event happened, ISO 8601 in UTC.
            "timestamp": datetime.fromtimestamp(delivery.created_at, UTC).isoformat(),
            "data": view.model_dump(mode="json"),
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        timestamp = int(now)
        headers = {
            "content-type": "application/json",
            "user-agent": "animfleet-webhooks/1",
            "webhook-id": delivery.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self._keys(record.tenant), delivery.id, timestamp, body),
        }
        attempt = WebhookAttempt(
            webhook_id=delivery.id,
            type=delivery.type,
            attempt=delivery.attempt,
            at=time.time(),
            outcome="retry",
        )
        started = time.perf_counter()
        try:
            response = self.netguard.request(
                "POST",
                delivery.url,
                headers=headers,
                content=body,
                timeout_s=self.settings.timeout_s,
                max_bytes=MAX_RESPONSE_BYTES,
            )
        except BlockedURL as error:
            attempt.outcome, attempt.error = "refused", str(error)
            return attempt, None
        except FetchFailed as error:
            attempt.error = str(error)
            attempt.latency_ms = round((time.perf_counter() - started) * 1000, 1)
            return attempt, None
        attempt.latency_ms = round((time.perf_counter() - started) * 1000, 1)
        attempt.status_code = response.status_code
        if response.is_success:
            attempt.outcome = "delivered"
        elif response.status_code == 410:
            attempt.outcome = "stopped"
        return attempt, _retry_after(response)

    def _next_delay(self, attempts_made: int, retry_after: float | None) -> float:
        base = self.settings.schedule_s[attempts_made]
        jitter = self.settings.jitter
        delay = base * self.rng.uniform(1 - jitter, 1 + jitter)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.settings.max_retry_after_s))
        return delay

    def _record(self, job_id: str, attempt: WebhookAttempt) -> None:
        def change(record: JobRecord) -> None:
            record.record_attempt(attempt)
            if attempt.outcome == "stopped":  # 410 Gone: the endpoint wants nothing more
                record.webhook_disabled = True

        with contextlib.suppress(JobNotFound):  # the record outlived: nothing to note it on
            self.store.update(job_id, change)


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), if any."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
