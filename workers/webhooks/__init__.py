"""Webhook delivery: Standard Webhooks signatures, a durable retry schedule, its own queue."""

from workers.webhooks.settings import WebhookSettings
from workers.webhooks.signing import sign

__all__ = ["WebhookSettings", "sign"]
