"""The lease that lets one sweeper copy at a time sweep a region.

Taken and renewed in one script that extends the lease only while it still holds the caller's
own name: a copy whose lease lapsed (a long pass, a paused process) finds another copy's name
there and stops, instead of extending the other copy's lease and sweeping beside it. The sweeper
renews it between the parts of a pass, so a pass longer than the lease keeps it, and a copy that
lost it stops mid-pass.
"""

from __future__ import annotations

import redis

from animfleet.errors import TransientError
from animfleet.region.keys import SWEEP_LEASE_KEY

# KEYS: lease. ARGV: holder, ttl ms. 1 when the caller holds the lease for ttl from now.
_HOLD = """
local held = redis.call('GET', KEYS[1])
if held == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class SweepLost(TransientError):
    """Another sweeper copy holds the region's lease now: this pass stops."""


class SweepLease:
    """One region's sweep lease as held by ``holder`` for ``lease_s`` at a time."""

    def __init__(self, client: redis.Redis, region: str, holder: str, lease_s: float) -> None:
        self.key, self.holder = SWEEP_LEASE_KEY + region, holder
        self.ttl_ms = max(1, int(lease_s * 1000))
        self._hold = client.register_script(_HOLD)

    def hold(self) -> bool:
        """Take the lease, or extend it if it is still ours; False if another copy holds it."""
        return bool(self._hold(keys=[self.key], args=[self.holder, self.ttl_ms]))

    def keep(self) -> None:
        """Extend the lease mid-pass; raises :class:`SweepLost` if another copy took it."""
        if not self.hold():
            raise SweepLost(f"{self.key} is held by another sweeper")
