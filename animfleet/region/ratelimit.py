"""Per-tenant request rate: a token bucket in the region's Redis, shared by its gateways.

One script refills and takes a token atomically, on Redis's clock (``TIME``), so gateways with
skewed clocks still share one bucket. An idle bucket expires once it would be full again.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from animfleet.region.keys import RATE_BUCKET

# KEYS: the bucket. ARGV: refill per second, size. Returns {allowed (1/0), ms until a token,
# whole tokens left, ms until the bucket is full}.
_TAKE = """
local rate = tonumber(ARGV[1])
local size = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or size
local at = tonumber(state[2]) or now
tokens = math.min(size, tokens + math.max(0, now - at) * rate / 1000)
local allowed = 0
local wait_ms = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait_ms = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((size - tokens) * 1000 / rate) + 1000)
return {allowed, wait_ms, math.floor(tokens), math.ceil((size - tokens) * 1000 / rate)}
"""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: float  # 0 when allowed
    limit: int = 0  # the bucket's size
    remaining: int = 0  # whole requests left now
    full_in_s: float = 0.0  # until the bucket is full again


class RateLimiter:
    def __init__(self, client: redis.Redis) -> None:
        self._take = client.register_script(_TAKE)

    def take(self, tenant: str, rate_per_s: float, size: int) -> Decision:
        """Take one token from ``tenant``'s bucket (``size`` tokens, refilled at
        ``rate_per_s``); when it is empty, say how long until the next token."""
        allowed, wait_ms, left, full_ms = self._take(
            keys=[RATE_BUCKET + tenant], args=[rate_per_s, size]
        )
        return Decision(bool(allowed), int(wait_ms) / 1000, size, int(left), int(full_ms) / 1000)
