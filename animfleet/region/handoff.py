"""Jobs leaving a region's backlog: onto its own GPU queue, or claimed for another region.

A move home is one script (:meth:`Handoff.move_home`, :mod:`.handoff_take`): while the region
has room under the admission rule, pick the next job by deficit round robin over tenants, take
it out of the backlog and push its stored Celery message onto the GPU queue (with the hand-off
on, onto the direct queue of an idle worker, choosing among the tenant's first jobs the one it
holds warm) and the job into the queued set, so a job is never in both places or neither. The
record is checked as it is popped: a job canceled, expired or past its start deadline is
dropped from the backlog instead (the overdue ones are returned so the caller ends them
``expired``).

A spill to another region cannot be one script (two Redis servers), so it is three steps, each
atomic and each safe to repeat: :meth:`claim` moves jobs from the backlog to a "moving" hash,
each entry stamped with the claim's fencing token; the caller admits a copy of the record in the
target region (its admission script refuses a duplicate id); :meth:`forward` turns the home
record into a pointer to the target (its ``region``) and drops the home's input, or
:meth:`give_back` returns the job to the backlog. Both check the token in the same script that
changes the record or the backlog, so a scheduler that stalled past its claim time, whose claim
was finished or handed back meanwhile, changes nothing when it wakes. A claim older than a lease
found by the next scheduler is finished or given back by checking the target (see
:class:`dispatcher.scheduler.RegionScheduler`, which also fences the target's side).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field

import redis

from animfleet.region.backlog import Backlog
from animfleet.region.broker_outbox import BrokerOutbox, outbox_key
from animfleet.region.handoff_take import TAKE, HandoffHints, HandoffSettings, Hints
from animfleet.region.keys import (
    BACKLOG_BYPASS,
    BACKLOG_DEFICIT,
    BACKLOG_MOVING,
    BUSY_SET,
    HOLDING_SET,
    INPUT_KEY,
    JOB_KEY,
    QUEUED_SET,
    SCHEDULER_LEASE,
    START_BY_SET,
    WORKER_SET,
)

# KEYS: moving, tenant backlog, backlog-all, messages, ring, active, deficits
# ARGV: job id, claim token
_GIVE_BACK = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local claim = cjson.decode(raw)
if (claim.token or '') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], claim.order, ARGV[1])
redis.call('ZADD', KEYS[3], claim.created, ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], claim.message)
redis.call('HINCRBYFLOAT', KEYS[7], claim.tenant, 1)
if redis.call('SADD', KEYS[6], claim.tenant) == 1 then
  redis.call('LPUSH', KEYS[5], claim.tenant)
end
return 1
"""

# KEYS: moving, record, start-by, holding set of the home region, input
# ARGV: job id, region of this record (home), target region, claim token
# The record becomes a pointer: only its "region" changes, textually (a JSON round trip in Lua
# would round the float timestamps). Only the claim's holder may do it: a claim handed back or
# finished by another scheduler has gone from the moving hash (or carries another token).
_FORWARD = """
local claim = redis.call('HGET', KEYS[1], ARGV[1])
if not claim or (cjson.decode(claim).token or '') ~= ARGV[4] then return {0, 'reclaimed'} end
redis.call('HDEL', KEYS[1], ARGV[1])
local raw = redis.call('GET', KEYS[2])
if not raw then return {0, 'missing'} end
local status = cjson.decode(raw).status
if status ~= 'queued' then return {0, status} end
local from = ',"region":"' .. ARGV[2] .. '"'
local at = string.find(raw, from, 1, true)
if not at then return {0, 'unexpected'} end
local moved = string.sub(raw, 1, at - 1) .. ',"region":"' .. ARGV[3] .. '"' ..
  string.sub(raw, at + #from)
redis.call('SET', KEYS[2], moved, 'KEEPTTL')
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[5])
return {1, status}
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') and 1 or 0
"""


@dataclass(frozen=True)
class Taken:
    """What one take answered: jobs moved (or claimed), entries dropped because their record
    ended or vanished, entries past their start deadline, the backlog left, and (a claim) the
    fencing token its later steps must show."""

    jobs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)
    remaining: int = 0
    token: str = ""
    placed: list[str] = field(default_factory=list)  # per job: the worker handed it, or ""
    outbox_entries: list[str] = field(default_factory=list)  # to publish (broker apart)


@dataclass(frozen=True)
class Claim:
    job_id: str
    target: str
    at: float
    message: str
    token: str = ""


def _text(items: list[bytes]) -> list[str]:
    return [item.decode() for item in items]


class Handoff:
    """Moves jobs out of one region's backlog."""

    def __init__(
        self,
        client: redis.Redis,
        region: str,
        queue: str,
        allowance: float,
        handoff: HandoffSettings | None = None,
        outbox: bool = False,
    ) -> None:
        self.redis, self.region, self.queue, self.allowance = client, region, queue, allowance
        self.outbox = outbox  # the broker is apart: messages go to the broker outbox
        self.settings = handoff or HandoffSettings()
        self.backlog = Backlog(client, region)
        self.moving_key = BACKLOG_MOVING + region
        self.deficit_key = BACKLOG_DEFICIT + region
        self.bypass_key = BACKLOG_BYPASS + region
        self.hints = HandoffHints(
            client, region, queue, self.backlog.tenant_key(""), self.backlog.ring_key, outbox
        )
        self._take = client.register_script(TAKE)
        self._give_back = client.register_script(_GIVE_BACK)
        self._forward = client.register_script(_FORWARD)
        self._renew = client.register_script(_RENEW)

    def _run_take(
        self,
        mode: str,
        most: int,
        target: str = "",
        budget: int = 1000,
        token: str = "",
        hints: Hints | None = None,
    ) -> Taken:
        b, hints = self.backlog, hints or Hints()
        keys = [
            WORKER_SET + self.region,
            BUSY_SET + self.region,
            QUEUED_SET + self.region,
            outbox_key(self.region) if self.outbox else self.queue,
            b.all_key,
            b.message_key,
            b.ring_key,
            b.active_key,
            self.deficit_key,
            b.weights_key,
            self.moving_key,
            self.bypass_key,
            *hints.queues,
            *hints.holder_keys,
        ]
        args: list[str | int] = [
            repr(time.time()),
            repr(self.allowance),
            most,
            b.tenant_key(""),
            JOB_KEY,
            mode,
            target,
            budget,
            token,
            self.settings.window,
            self.settings.bypass_limit,
            self.settings.borrow,
            len(hints.workers),
            *hints.workers,
            len(hints.jobs),
            *(part for job, sets in hints.jobs.items() for part in (job, ",".join(map(str, sets)))),
            repr(BrokerOutbox.due_at()) if self.outbox and mode == "home" else "",
            self.queue,
        ]
        jobs, skipped, overdue, remaining, placed, sent = self._take(keys=keys, args=args)
        return Taken(
            _text(jobs),
            _text(skipped),
            _text(overdue),
            int(remaining),
            token,
            _text(placed),
            _text(sent),
        )

    def move_home(self, most: int = 100) -> Taken:
        """Move up to ``most`` jobs onto this region's GPU queue while it has room; with the
        hand-off on, each idle worker first gets the job it holds warm (see
        :mod:`.handoff_take`)."""
        hints = self.hints.read(self.settings.window) if self.settings.enabled else None
        return self._run_take("home", most, hints=hints)

    def claim(self, target: str, most: int) -> Taken:
        """Take up to ``most`` jobs out of the backlog, marked as moving to ``target`` under a
        new fencing token (``Taken.token``)."""
        return self._run_take("claim", most, target, token=secrets.token_hex(8))

    def give_back(self, job_id: str, token: str) -> bool:
        """Return a claimed job to its tenant's backlog (the target could not take it); False
        when the claim under ``token`` is no longer held."""
        b = self.backlog
        raw = self.redis.hget(self.moving_key, job_id)
        if raw is None:
            return False
        tenant = json.loads(raw)["tenant"]
        keys = [
            self.moving_key,
            b.tenant_key(tenant),
            b.all_key,
            b.message_key,
            b.ring_key,
            b.active_key,
            self.deficit_key,
        ]
        return bool(self._give_back(keys=keys, args=[job_id, token]))

    def forward(self, job_id: str, home: str, target: str, token: str) -> tuple[bool, str]:
        """Point the home record at ``target`` once the target holds the job; returns
        (forwarded, status). Not forwarded when the record ended meanwhile (canceled or
        expired): the caller ends the target's copy the same way; nor, status ``reclaimed``,
        when the claim under ``token`` is no longer held (nothing changes then)."""
        keys = [
            self.moving_key,
            JOB_KEY + job_id,
            START_BY_SET + self.region,
            HOLDING_SET + home,
            INPUT_KEY + job_id,
        ]
        done, status = self._forward(keys=keys, args=[job_id, self.region, target, token])
        return bool(done), status.decode() if isinstance(status, bytes) else str(status)

    def claims(self) -> dict[str, Claim]:
        """Jobs half-way to another region."""
        found: dict[str, Claim] = {}
        entries: dict[bytes, bytes] = self.redis.hgetall(self.moving_key)  # type: ignore[assignment]
        for raw_id, raw in entries.items():
            entry = json.loads(raw)
            job_id = raw_id.decode()
            found[job_id] = Claim(
                job_id,
                entry["target"],
                float(entry["at"]),
                entry["message"],
                entry.get("token") or "",
            )
        return found

    # -- one mover per region ------------------------------------------------------------------
    def hold_lease(self, owner: str, ttl_s: float) -> bool:
        """Take or renew this region's scheduler lease; False while another owner holds it."""
        return bool(
            self._renew(keys=[SCHEDULER_LEASE + self.region], args=[owner, int(ttl_s * 1000)])
        )

    def release_lease(self, owner: str) -> None:
        if self.redis.get(SCHEDULER_LEASE + self.region) == owner.encode():
            self.redis.delete(SCHEDULER_LEASE + self.region)
