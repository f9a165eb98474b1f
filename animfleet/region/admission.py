"""The one script that creates job records: admission into a region, atomically.

A job that can start now (a GPU free under the admission limit and no backlog ahead of it) goes
onto the region's GPU queue; otherwise, when the caller asks for it, the record, its input and
its Celery message are stored and the job joins its tenant's queue in the backlog
(:mod:`animfleet.region.backlog`), all in the same call, so two dispatchers can never overfill a
region between them and a record never exists without its message (or the reverse). The same
call binds the job's idempotency keys, lists the job under its tenant (at home) and picks the
idle worker already holding the job's image template or add-ons (:mod:`.affinity`), and
records, at the job's home, the uploads its request named (deleted with the job,
:mod:`.erasure`). Tests and tools seed records through it too (:meth:`AdmissionScript.seed`:
no capacity check, no message).

Each call carries a nonce of its own. A call that wrote a job leaves its answer under the job id
with that nonce (:data:`ADMIT_REPLY`, :data:`REPLY_TTL_S`), and a call that finds its own nonce
there answers that instead of running again: when the reply is lost after Redis ran the script
(a dropped connection), the client's retry of the same call gets the outcome that happened (the
same job, the same queue or backlog placement), never a second job or "exists already";
:meth:`AdmissionScript.recall` reads it without calling again.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

import redis

from animfleet.jobs import JobRecord
from animfleet.region.affinity import MAX_CANDIDATES
from animfleet.region.backlog import Backlog, order_score
from animfleet.region.broker_outbox import LUA_SEND, BrokerOutbox, claims_key, outbox_key
from animfleet.region.keys import (
    ADMIT_REPLY,
    BUSY_SET,
    HOLDING_SET,
    INPUT_KEY,
    INPUT_TTL_S,
    JOB_KEY,
    JOB_UPLOADS,
    QUEUED_SET,
    RECORD_TTL_S,
    START_BY_SET,
    TENANT_IN_FLIGHT,
    TENANT_JOBS,
    WORKER_SET,
)


class AdmissionOutcome(IntEnum):
    """What an admission answered."""

    EXISTS = -1  # a record of that id exists already: nothing written
    FULL = 0  # no room now and no backlog asked for: nothing written
    ADMITTED = 1  # on the GPU queue (or, seeded, stored without a message)
    REPEAT = 2  # an idempotency key was bound before: nothing written
    BACKLOGGED = 3  # stored, waiting in the region's backlog
    CAPPED = 4  # a backlog cap is reached: nothing written


def admission_limit(live_workers: int, allowance: float) -> int:
    """The most jobs (queued + running) a region with ``live_workers`` GPUs may hold: one per
    GPU plus ``allowance`` of them, rounded down (:data:`LUA_ADMISSION_LIMIT` is the same)."""
    return math.floor(live_workers * (1.0 + allowance) + 1e-9)


# admission_limit for the region's scripts (this one and the backlog's hand-off).
LUA_ADMISSION_LIMIT = """
local function admission_limit(live, allowance)
  return math.floor(live * (1 + allowance) + 1e-9)
end
"""

Mode = Literal["direct", "backlog", "seed"]
# How long a call's answer is kept for a repeat of the same call: well past the store client's
# retries (seconds) and the caller's read of it after they failed.
REPLY_TTL_S = 300
NONCE_BYTES = 8

# KEYS: workers, busy, queued, start-by, record, input, GPU queue (the broker outbox when the
#       broker is apart), holding set of the home region, backlog-all, the tenant's backlog,
#       messages, ring, active, the tenant's listing, the tenant's in-flight set, the direct
#       claims, the call's reply, the job's uploads, then n held-by sets (one per thing the
#       job would find warm), then the idempotency keys
# ARGV: now, allowance ('' = none), record json, inputs, record ttl, input ttl, job id,
#       created at, start-by (or ''), message, idempotency entry, mode, tenant, order score,
#       tenant cap (''), region cap (''), n, direct queue prefix, index ('1': list the job
#       under its tenant), listing horizon, outbox entry time ('' = push onto the queue), the
#       GPU queue's name, the call's nonce, the uploads (JSON list, '' = none), reply ttl,
#       record ttl (of the uploads set), then one ttl per idempotency key
# A direct admission goes to the worker holding most of the job's things (ties by name) that
# is live, idle and has nothing in its direct queue (the 4th answer names it, '' for the shared
# queue KEYS[7]). The direct queues' names are built here (``<prefix><worker>``): which worker
# is chosen is only known inside the script (from the held-by sets it reads), and with the
# broker in the store, a region's keys all live in one Redis. With the broker apart
# (:mod:`.broker_outbox`: a cluster store is always apart) the message goes to the outbox, and
# "nothing in its direct queue" is "not handed a job in the last moments" (the direct claims):
# no key is built then but from the store's tagged prefixes (see the take script's note).
_ADMIT = (
    LUA_ADMISSION_LIMIT
    + LUA_SEND
    + """
local prior = redis.call('GET', KEYS[17])
if prior then
  local sep = string.find(prior, ' ', 1, true)
  if sep and string.sub(prior, 1, sep - 1) == ARGV[23] then
    return cjson.decode(string.sub(prior, sep + 1))  -- this very call ran before: its answer
  end
end
local function done(answer)
  redis.call('SET', KEYS[17], ARGV[23] .. ' ' .. cjson.encode(answer), 'EX', ARGV[25])
  return answer
end
local n = tonumber(ARGV[17])
local idem = 19 + n
local apart = ARGV[21] ~= ''
for i = idem, #KEYS do
  local earlier = redis.call('GET', KEYS[i])
  if earlier then return {2, 0, 0, earlier, i - idem + 1} end
end
local now, mode = tonumber(ARGV[1]), ARGV[12]
local live, held, direct = 0, 0, false
if mode ~= 'seed' then
  live = redis.call('ZCOUNT', KEYS[1], now, '+inf')
  held = redis.call('ZCOUNT', KEYS[2], now, '+inf') + redis.call('ZCARD', KEYS[3])
  local waiting = redis.call('ZCARD', KEYS[9])
  local room = ARGV[2] == '' or held < admission_limit(live, tonumber(ARGV[2]))
  direct = room and waiting == 0
  if not direct and mode ~= 'backlog' then return {0, live, held} end
  if not direct then
    if ARGV[16] ~= '' and waiting >= tonumber(ARGV[16]) then return {4, live, held, 'region'} end
    local mine = redis.call('ZCARD', KEYS[10])
    if ARGV[15] ~= '' and mine >= tonumber(ARGV[15]) then return {4, live, held, 'tenant'} end
  end
end
if not redis.call('SET', KEYS[5], ARGV[3], 'EX', ARGV[5], 'NX') then return {-1, live, held} end
redis.call('SET', KEYS[6], ARGV[4], 'EX', ARGV[6])
if ARGV[9] ~= '' then redis.call('ZADD', KEYS[4], ARGV[9], ARGV[7]) end
redis.call('ZADD', KEYS[8], ARGV[8], ARGV[7])
for i = idem, #KEYS do redis.call('SET', KEYS[i], ARGV[11], 'EX', ARGV[27 + i - idem]) end
if ARGV[24] ~= '' then
  for _, upload in ipairs(cjson.decode(ARGV[24])) do redis.call('SADD', KEYS[18], upload) end
  redis.call('EXPIRE', KEYS[18], ARGV[26])
end
if ARGV[19] == '1' then
  redis.call('ZADD', KEYS[14], 'NX', ARGV[8], ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[14], '-inf', '(' .. ARGV[20])
  redis.call('ZADD', KEYS[15], ARGV[8], ARGV[7])
end
if mode == 'seed' then
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
  return done({1, 0, 0, ''})
end
if direct then
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
  local counts, holders = {}, {}
  for k = 19, 18 + n do
    for _, worker in ipairs(redis.call('ZRANGEBYSCORE', KEYS[k], now, '+inf')) do
      if not counts[worker] then
        counts[worker] = 0
        holders[#holders + 1] = worker
      end
      counts[worker] = counts[worker] + 1
    end
  end
  table.sort(holders, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return a < b
  end)
  local chosen = ''
  for c = 1, math.min(#holders, MAX_CANDIDATES) do
    local worker = holders[c]
    local lapse = redis.call('ZSCORE', KEYS[1], worker)
    local busy = redis.call('ZSCORE', KEYS[2], worker)
    local queued
    if apart then queued = handed(KEYS[16], worker, now)
    else queued = redis.call('LLEN', ARGV[18] .. worker) > 0 end
    if lapse and tonumber(lapse) > now and not (busy and tonumber(busy) > now)
        and not queued then
      chosen = worker
      break
    end
  end
  local target = chosen ~= '' and ARGV[18] .. chosen or (apart and ARGV[22] or KEYS[7])
  if apart and chosen ~= '' then claim(KEYS[16], chosen, now) end
  return done({1, live, held + 1, chosen, send(KEYS[7], ARGV[21], target, ARGV[10])})
end
redis.call('ZADD', KEYS[9], ARGV[8], ARGV[7])
redis.call('ZADD', KEYS[10], ARGV[14], ARGV[7])
redis.call('HSET', KEYS[11], ARGV[7], ARGV[10])
if redis.call('SADD', KEYS[13], ARGV[13]) == 1 then redis.call('RPUSH', KEYS[12], ARGV[13]) end
return done({3, live, held})
""".replace("MAX_CANDIDATES", str(MAX_CANDIDATES))
)


@dataclass(frozen=True)
class BacklogCaps:
    """Most jobs one tenant, and the whole region, may have waiting (``None``: no cap)."""

    tenant: int | None = None
    region: int | None = None


@dataclass(frozen=True)
class Admission:
    """What :meth:`AdmissionScript.admit` answered; with ``REPEAT``, ``earlier`` holds the
    idempotency entry bound before and ``matched`` its 1-based key; with ``CAPPED``, ``cap``
    says which (``tenant`` or ``region``)."""

    outcome: AdmissionOutcome
    live_workers: int
    held: int
    earlier: bytes | None = None
    matched: int = 0
    cap: str = ""
    worker: str | None = None  # the holder whose direct queue took the job
    outbox_entry: str = ""  # with the broker apart: the message to publish (BrokerOutbox)


class AdmissionScript:
    """One region's admission script, in that region's Redis."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.backlog = Backlog(client, region)
        self._script = client.register_script(_ADMIT)

    def admit(
        self,
        record: JobRecord,
        inputs: bytes,
        *,
        mode: Mode,
        message: str = "",
        queue: str = "",
        allowance: float | None = None,
        caps: BacklogCaps = BacklogCaps(),
        idempotency: Sequence[tuple[str, int]] = (),
        idempotency_entry: str = "",
        held_by: Sequence[str] = (),
        direct_prefix: str = "",
        index: bool = False,
        outbox: bool = False,
        uploads: Sequence[str] = (),
        nonce: str = "",
    ) -> Admission:
        """Take ``record`` (of this region) and its stored ``inputs`` in, as ``mode`` says:
        ``direct`` onto ``queue`` (or a holder's direct queue) if it can start now, else FULL;
        ``backlog`` the same, else into the backlog; ``seed`` stored as queued with no message
        and no capacity check.

        ``idempotency`` lists (Redis key, ttl) pairs to bind to ``idempotency_entry``.
        ``held_by``: the held-by sets of the things the job would find warm
        (:class:`animfleet.region.affinity.Holdings`); a holder's direct queue is
        ``direct_prefix`` + its name. ``index``: list the job under its tenant (its home).
        ``outbox``: the broker is apart from the store; the message goes to the region's
        broker outbox, to publish from :attr:`Admission.outbox_entry`.
        ``uploads``: the upload keys the request named, recorded with the job (at its home).
        ``nonce``: this call's own (a fresh one when empty); a repeat of the call with the same
        nonce answers what the first did (see the module docstring).
        """
        limits = [t for t in (record.start_deadline, record.deadline) if t is not None]
        backlog, tenant = self.backlog, record.tenant
        now = time.time()
        keys = [
            WORKER_SET + self.region,
            BUSY_SET + self.region,
            QUEUED_SET + self.region,
            START_BY_SET + self.region,
            JOB_KEY + record.id,
            INPUT_KEY + record.id,
            # unused by a seed: any key of the store's slot
            outbox_key(self.region) if outbox else queue or QUEUED_SET + self.region,
            HOLDING_SET + record.home_region,
            backlog.all_key,
            backlog.tenant_key(tenant),
            backlog.message_key,
            backlog.ring_key,
            backlog.active_key,
            TENANT_JOBS + tenant,
            TENANT_IN_FLIGHT + tenant,
            claims_key(self.region),
            ADMIT_REPLY + record.id,
            JOB_UPLOADS + record.id,
            *held_by,
            *(key for key, _ in idempotency),
        ]
        args: list[Any] = [
            repr(now),
            "" if allowance is None else repr(allowance),
            record.model_dump_json(),
            inputs,
            RECORD_TTL_S,
            INPUT_TTL_S,
            record.id,
            repr(record.created_at),
            repr(min(limits)) if limits else "",
            message,
            idempotency_entry,
            mode,
            tenant,
            repr(order_score(record.priority, record.created_at)),
            "" if caps.tenant is None else caps.tenant,
            "" if caps.region is None else caps.region,
            len(held_by),
            direct_prefix,
            "1" if index else "",
            repr(now - RECORD_TTL_S),
            repr(BrokerOutbox.due_at(now)) if outbox else "",
            queue,
            nonce or secrets.token_hex(NONCE_BYTES),
            json.dumps(sorted(uploads)) if uploads else "",
            REPLY_TTL_S,
            RECORD_TTL_S,
            *(ttl for _, ttl in idempotency),
        ]
        # redis-py's call: EVALSHA, loading the script on NOSCRIPT, with the client's retries
        # (store_client); a retry after a lost reply is answered by the nonce.
        return _admission(self._script(keys=keys, args=args))

    def recall(self, job_id: str, nonce: str) -> Admission | None:
        """What the call with ``nonce`` answered when it wrote ``job_id``; ``None`` when no
        such call wrote it (it did not run, or wrote nothing). For a caller whose reply was
        lost and whose client's retries failed too: a read, not a second admission."""
        prior = self.redis.get(ADMIT_REPLY + job_id)
        if prior is None:
            return None
        mine, _, answer = (prior.decode() if isinstance(prior, bytes) else str(prior)).partition(
            " "
        )
        if mine != nonce:
            return None
        return _admission([_wire(item) for item in json.loads(answer)])

    def seed(self, record: JobRecord, inputs: bytes, index: bool = False) -> None:
        """Store a new queued record and its input with no message (the job reaches a worker
        by other means: tests, tools); raises FileExistsError if the id exists already."""
        if self.admit(record, inputs, mode="seed", index=index).outcome is AdmissionOutcome.EXISTS:
            raise FileExistsError(f"job {record.id} exists already")


def _wire(item: object) -> object:
    """A decoded JSON answer item as the script's reply carries it (strings as bytes)."""
    return item.encode() if isinstance(item, str) else item


def _admission(answer: Sequence[Any]) -> Admission:
    outcome = AdmissionOutcome(int(answer[0]))
    if outcome is AdmissionOutcome.REPEAT:
        return Admission(outcome, 0, 0, earlier=answer[3], matched=int(answer[4]))
    cap = answer[3].decode() if outcome is AdmissionOutcome.CAPPED else ""
    admitted = outcome is AdmissionOutcome.ADMITTED and len(answer) > 4
    worker = (answer[3].decode() or None) if admitted else None
    item = answer[4].decode() if admitted else ""
    return Admission(
        outcome, int(answer[1]), int(answer[2]), cap=cap, worker=worker, outbox_entry=item
    )


def seed(client: redis.Redis, record: JobRecord, inputs: bytes, index: bool = False) -> None:
    """:meth:`AdmissionScript.seed` in ``record``'s region, whose Redis ``client`` is."""
    AdmissionScript(client, record.region).seed(record, inputs, index)
