"""Gateway settings, from ``ANIMFLEET_GATEWAY_*`` environment variables."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load

MAX_PREFER_WAIT_S = 60.0


class GatewaySettings(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_GATEWAY_")

    region: str  # the home region of jobs submitted through this gateway
    max_wait_s: float = Field(default=MAX_PREFER_WAIT_S, ge=0, le=MAX_PREFER_WAIT_S)
    threads: int = Field(default=200, ge=1, le=10_000)  # requests handled at once

    @classmethod
    def from_env(cls, region: str, env: Mapping[str, str] | None = None) -> GatewaySettings:
        """``region`` (from the command line) and ``ANIMFLEET_GATEWAY_MAX_WAIT_S``,
        ``ANIMFLEET_GATEWAY_THREADS``. Raises :class:`animfleet.settings.SettingsError`."""
        return load(cls, env, region=region)
