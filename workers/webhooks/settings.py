"""Webhook sender settings, from ``ANIMFLEET_WEBHOOK_*`` environment variables."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load
from workers.webhooks.signing import secret_key

# Delay before each attempt: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h
# (the Standard Webhooks example), so the last attempt comes ~3 days after the event.
DEFAULT_SCHEDULE_S = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 50400.0, 72000.0, 86400.0)


class WebhookSettings(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_WEBHOOK_")

    # Every active secret signs; the first is the newest. Masked in reprs, logs and settings
    # errors (SecretStr). From the environment: comma-separated ``whsec_...``, required.
    secrets: tuple[SecretStr, ...] = Field(min_length=1)
    schedule_s: tuple[float, ...] = Field(default=DEFAULT_SCHEDULE_S, min_length=1)
    jitter: float = Field(default=0.2, ge=0, le=1)  # each delay is scaled by U(1 - j, 1 + j)
    max_retry_after_s: float = Field(default=86400.0, gt=0)  # a receiver's Retry-After, capped
    # Standard Webhooks suggests 15-30 s for a receiver to answer before a retry.
    timeout_s: float = Field(default=15.0, gt=0, le=60)
    poll_s: float = Field(default=0.5, gt=0, le=30)  # how often due deliveries are looked for
    lease_s: float = Field(default=120.0, gt=0)  # a claimed delivery is retried after this long
    concurrency: int = Field(default=8, ge=1, le=256)
    # The sender serves Prometheus /metrics here; None: not served.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)

    @field_validator("secrets", "schedule_s", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        # The environment gives lists as comma-separated strings ("0,5,300").
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("secrets")
    @classmethod
    def _valid_secrets(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        for secret in value:
            secret_key(secret.get_secret_value())
        return value

    @field_validator("schedule_s")
    @classmethod
    def _non_negative(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(delay < 0 for delay in value):
            raise ValueError(f"retry delays must be >= 0, got {list(value)}")
        return value

    @property
    def keys(self) -> list[bytes]:
        return [secret_key(secret.get_secret_value()) for secret in self.secrets]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        """Read ``ANIMFLEET_WEBHOOK_SECRETS`` (comma-separated ``whsec_...``, required),
        ``..._SCHEDULE_S`` (comma-separated delays), ``..._JITTER``, ``..._TIMEOUT_S``,
        ``..._POLL_S``, ``..._LEASE_S``, ``..._CONCURRENCY``, ``..._MAX_RETRY_AFTER_S``,
        ``..._METRICS_PORT``. Raises :class:`animfleet.settings.SettingsError`."""
        return load(cls, env)
