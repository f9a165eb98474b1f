"""Gateway settings, from ``ANIMFLEET_GATEWAY_*`` environment variables."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load
from animfleet_api.bounds import MAX_PREFER_WAIT_S


class GatewaySettings(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_GATEWAY_")

    region: str  # the home region of jobs submitted through this gateway
    max_wait_s: float = Field(default=float(MAX_PREFER_WAIT_S), ge=0, le=MAX_PREFER_WAIT_S)
    threads: int = Field(default=200, ge=1, le=10_000)  # requests handled at once
    # API keys on every route but health, metrics, the OpenAPI document and the playground.
    # Off: one implicit tenant, ``default`` (a private network or tests only).
    auth: bool = True
    # Origins allowed to call from a browser, comma-separated ("*": any); none by default.
    cors_origins: tuple[str, ...] = ()
    # A request body past this is refused with 413 as soon as the cap is passed; the largest
    # image (10 MiB) inlined as base64 with the rest of a job fits.
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    # A request body that stops arriving for this long gets 408 and its connection closes; a
    # request line and headers not complete this long after they began, the same.
    body_timeout_s: float = Field(default=10.0, gt=0, le=300)
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # The whole request body must arrive within this of the request's start (408 past it): a
    # body trickled a byte at a time cannot hold a connection. 16 MiB at 1.2 Mbit/s fits.
    body_deadline_s: float = Field(default=120.0, gt=0, le=3600)
    # Open connections (and requests in progress) at once; past it, new requests get 503.
    max_connections: int = Field(default=1000, ge=1, le=100_000)
    # Images checked at once, by their pixels (a 4096x4096 image is 16 Mpx, the largest taken;
    # a 512 px photo a quarter of one): past it, a check waits its turn. Bounds the memory
    # checks take (a decode: 4 bytes a pixel) and keeps the cores they take from the requests.
    decode_pixels: int = Field(default=16 * 2**20, ge=16 * 2**20)
    events_poll_s: float = Field(default=0.2, gt=0, le=5)  # how often an SSE stream looks
    events_heartbeat_s: float = Field(default=15.0, gt=0, le=300)  # keeps proxies from closing
    # Requests fetching an image URL at once (each holds a thread up to 10 s), in all and per
    # tenant; past either, 429: slow origins cannot take the threads other requests need.
    url_fetches: int = Field(default=32, ge=1)
    url_fetches_per_tenant: int = Field(default=8, ge=1)

    @model_validator(mode="after")
    def _fetches_leave_threads(self) -> GatewaySettings:
        if not self.url_fetches_per_tenant <= self.url_fetches < self.threads:
            raise ValueError(
                f"need {self.env_name('url_fetches_per_tenant')}={self.url_fetches_per_tenant}"
                f" <= {self.env_name('url_fetches')}={self.url_fetches}"
                f" < {self.env_name('threads')}={self.threads}: fetches must leave threads free"
            )
        return self

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @classmethod
    def from_env(cls, region: str, env: Mapping[str, str] | None = None) -> GatewaySettings:
        """``region`` (from the command line) and ``ANIMFLEET_GATEWAY_*`` (``MAX_WAIT_S``,
        ``THREADS``, ``AUTH``, ``CORS_ORIGINS``, ``MAX_BODY_BYTES``, ``BODY_TIMEOUT_S``,
        ``HEADER_TIMEOUT_S``, ``BODY_DEADLINE_S``, ``MAX_CONNECTIONS``, ``DECODE_PIXELS``,
        ``EVENTS_POLL_S``,
        ``EVENTS_HEARTBEAT_S``, ``URL_FETCHES``, ``URL_FETCHES_PER_TENANT``). Raises
        :class:`animfleet.settings.SettingsError`."""
        return load(cls, env, region=region)
