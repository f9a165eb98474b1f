"""The durable schedule of webhook deliveries: a sorted set per region, delivery id -> due time.

Nothing is kept only in memory and no Celery ETA is used (kombu #337: an ETA near the Redis
visibility timeout gets a message delivered twice, and a long ETA is held in a worker's memory).
The webhooks process claims due deliveries by moving their score forward by a lease and
publishes one task per claim; the task finishes by rescheduling or removing the delivery, but
only while it still holds that lease. If the process dies anywhere in between, the lease runs
out and the delivery is claimed again: at-least-once, de-duplicated by ``webhook-id``.
"""

from __future__ import annotations

import redis

from animfleet.constants import WEBHOOK_DUE_SET

# Claim up to ARGV[3] members due by ARGV[1]; each is re-scored to ARGV[2] (the lease end).
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], member)
end
return due
"""

# Reschedule (ARGV[3] = new due time) or remove (ARGV[3] = '') a member if it still has the
# lease ARGV[2]; returns 1 if it did.
_SETTLE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or math.abs(tonumber(score) - tonumber(ARGV[2])) > 0.0005 then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""


class DueSet:
    """The deliveries of one region that are due or will be."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.key = client, WEBHOOK_DUE_SET + region
        self._claim = client.register_script(_CLAIM)
        self._settle = client.register_script(_SETTLE)

    def claim(self, now: float, lease_until: float, limit: int = 100) -> list[str]:
        """Ids of deliveries due by ``now``, each now leased until ``lease_until``."""
        lease = _score(lease_until)
        raw = self._claim(keys=[self.key], args=[now, lease, limit])
        return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]

    def holds(self, delivery_id: str, lease_until: float) -> bool:
        score = self.redis.zscore(self.key, delivery_id)
        return score is not None and abs(score - float(_score(lease_until))) <= 0.0005

    def reschedule(self, delivery_id: str, lease_until: float, due: float) -> bool:
        return bool(self._settle(keys=[self.key], args=[delivery_id, _score(lease_until), due]))

    def remove(self, delivery_id: str, lease_until: float) -> bool:
        return bool(self._settle(keys=[self.key], args=[delivery_id, _score(lease_until), ""]))

    def pending(self) -> int:
        return int(self.redis.zcard(self.key))


def _score(value: float) -> str:
    """Scores as fixed strings, so the task compares exactly what was written."""
    return f"{value:.3f}"
