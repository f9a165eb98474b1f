"""Gateway settings, from ``ANIMFLEET_GATEWAY_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

MAX_PREFER_WAIT_S = 60.0


class GatewaySettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    region: str  # the home region of jobs submitted through this gateway
    max_wait_s: float = Field(default=MAX_PREFER_WAIT_S, ge=0, le=MAX_PREFER_WAIT_S)
    threads: int = Field(default=200, ge=1, le=10_000)  # requests handled at once

    @classmethod
    def from_env(cls, region: str, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        values: dict[str, object] = {"region": region}
        for name in ("max_wait_s", "threads"):
            if f"ANIMFLEET_GATEWAY_{name.upper()}" in env:
                values[name] = env[f"ANIMFLEET_GATEWAY_{name.upper()}"]
        return cls.model_validate(values)
