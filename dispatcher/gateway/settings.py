"""Gateway settings, from ``ANIMFLEET_GATEWAY_*`` environment variables."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load

MAX_PREFER_WAIT_S = 60.0


class GatewaySettings(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_GATEWAY_")

    region: str  # the home region of jobs submitted through this gateway
    max_wait_s: float = Field(default=MAX_PREFER_WAIT_S, ge=0, le=MAX_PREFER_WAIT_S)
    threads: int = Field(default=200, ge=1, le=10_000)  # requests handled at once
    # API keys on every route but health, metrics, the OpenAPI document and the playground.
    # Off: one implicit tenant, ``default`` (a private network or tests only).
    auth: bool = True
    # Origins allowed to call from a browser, comma-separated ("*": any); none by default.
    cors_origins: tuple[str, ...] = ()
    # A request body past this is refused with 413 as soon as the cap is passed; the largest
    # image (10 MiB) inlined as base64 with the rest of a job fits.
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    events_poll_s: float = Field(default=0.2, gt=0, le=5)  # how often an SSE stream looks
    events_heartbeat_s: float = Field(default=15.0, gt=0, le=300)  # keeps proxies from closing

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @classmethod
    def from_env(cls, region: str, env: Mapping[str, str] | None = None) -> GatewaySettings:
        """``region`` (from the command line) and ``ANIMFLEET_GATEWAY_*`` (``MAX_WAIT_S``,
        ``THREADS``, ``AUTH``, ``CORS_ORIGINS``, ``MAX_BODY_BYTES``, ``EVENTS_POLL_S``,
        ``EVENTS_HEARTBEAT_S``). Raises :class:`animfleet.settings.SettingsError`."""
        return load(cls, env, region=region)
