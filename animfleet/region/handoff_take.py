"""The take script: which backlog job leaves next, and where it goes (cache-aware when saturated).

One atomic script (:data:`TAKE`, run by :class:`animfleet.region.handoff.Handoff`) takes jobs
out of a region's backlog while the region has room. The tenant comes from deficit round robin
over the tenants' weights, as before. With the hand-off on, a job that can start now goes to
an idle worker's direct queue (:mod:`animfleet.region.affinity`), and the job it gets is, among
the first ``window`` jobs of that tenant, the one whose template and add-ons the worker holds
most of; when it holds none, a job it holds from another tenant, taken out of turn and paid
back from that tenant's next turns (a tenant is never more than ``borrow`` jobs ahead), else
the first that no worker holds (a job another worker holds warm is left for that worker), else
the tenant's head. Affinity reorders jobs within a tenant and borrows at most ``borrow`` turns
across tenants, so each tenant's share stays the round robin's; and each job counts the times a
job of its tenant behind it was taken first: once passed over ``bypass_limit`` times it is
taken next, whatever the worker holds, so affinity delays no job by more than
``bypass_limit`` hand-offs of its tenant.

The script cannot hash an image, so the scheduler reads the jobs at the head of each tenant's
queue beforehand (:class:`HandoffHints`) and passes, per job, the holder sets (``held-by``
keys) of its things; the script reads those sets itself, so what a worker holds is read in the
same atomic step that places the job. A job the hints missed (it arrived meanwhile) simply
counts as held by nobody.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from animfleet.jobs import JobRecord
from animfleet.region.admission import LUA_ADMISSION_LIMIT
from animfleet.region.affinity import Holdings, direct_queue_of, things_of
from animfleet.region.broker_outbox import LUA_SEND, claims_key
from animfleet.region.keys import BUSY_SET, DIRECT_QUEUES, JOB_KEY, WORKER_SET

# KEYS: workers, busy, queued, GPU queue (the broker outbox when the broker is apart),
#       backlog-all, messages, ring, active, deficits, weights, moving, bypass counts, then per
#       candidate worker its direct queue (the direct claims when the broker is apart), then
#       the holder sets the hints name
# ARGV: now, allowance, most jobs to take, tenant key prefix, record key prefix,
#       mode ('home' | 'claim'), target region (claim), most entries to look at, claim token,
#       window, bypass limit, borrow, n, the n workers, m, then m (job id, holder-set key
#       indices joined by ',') pairs, then the outbox entry time ('' = push onto the queues)
#       and the GPU queue's name
# Answer: jobs taken, skipped, overdue, backlog left, the worker each went to ('' = shared),
#       and the outbox entries to publish (none when the broker is the store).
# Undeclared keys: the tenant whose turn it is comes from the ring and the job from that
# tenant's queue, both read inside this atomic step, so the script builds those two keys from
# the prefixes in ARGV (a tenant's backlog, a job's record). Passing them as KEYS would need a
# read ahead of every take and a retry whenever a submit or another take moved the ring in
# between. Both prefixes start with the store's hash tag (:mod:`animfleet.region.keys`), as
# every declared key does, so on a Redis Cluster they hash to the declared keys' slot, which
# is all the cluster checks (a key of another slot would fail the call, never go astray).
TAKE = (
    LUA_ADMISSION_LIMIT
    + LUA_SEND
    + """
local now, allowance, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local budget = tonumber(ARGV[8])
local window, limit, borrow = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local n = tonumber(ARGV[13])
local tail = 15 + n + 2 * tonumber(ARGV[14 + n])
local at, apart = ARGV[tail], ARGV[tail] ~= ''
local taken, skipped, overdue, placed, sent = {}, {}, {}, {}, {}
local hints = {}
for j = 1, tonumber(ARGV[14 + n]) do
  local sets = {}
  for index in string.gmatch(ARGV[14 + n + 2 * j], '%d+') do table.insert(sets, tonumber(index)) end
  hints[ARGV[13 + n + 2 * j]] = sets
end

local function room()
  if ARGV[6] == 'claim' then return most - #taken end
  local live = redis.call('ZCOUNT', KEYS[1], now, '+inf')
  local held = redis.call('ZCOUNT', KEYS[2], now, '+inf') + redis.call('ZCARD', KEYS[3])
  return admission_limit(live, allowance) - held
end

-- The first candidate worker that is live, idle and has nothing in its direct queue.
local function idle_worker()
  if ARGV[6] ~= 'home' then return nil end
  for c = 1, n do
    local worker = ARGV[13 + c]
    local lapse = redis.call('ZSCORE', KEYS[1], worker)
    local busy = redis.call('ZSCORE', KEYS[2], worker)
    local queued
    if apart then queued = handed(KEYS[12 + c], worker, now)
    else queued = redis.call('LLEN', KEYS[12 + c]) > 0 end
    if lapse and tonumber(lapse) > now and not (busy and tonumber(busy) > now)
        and not queued then
      return c
    end
  end
  return nil
end

-- How many of job ``id``'s things ``worker`` holds; and whether any live worker holds one.
local function held_by(worker, id)
  local count, anyone = 0, false
  for _, index in ipairs(hints[id] or {}) do
    local lapse = redis.call('ZSCORE', KEYS[index], worker)
    if lapse and tonumber(lapse) > now then count = count + 1 end
    anyone = anyone or redis.call('ZCOUNT', KEYS[index], now, '+inf') > 0
  end
  return count, anyone
end

-- The job of ``queue`` to take next: a job passed over ``limit`` times first, else (for a
-- worker) the one it holds most of among the first ``window``, else the first that no worker
-- holds (a job another worker holds is left for it), else the head. Returns the flat ZRANGE
-- answer and the chosen job's position in it (1, 3, 5, ...).
local function choose(queue, worker)
  if not worker or window <= 1 then
    return redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES'), 1, 0, false
  end
  local jobs = redis.call('ZRANGE', queue, 0, window - 1, 'WITHSCORES')
  for i = 1, #jobs, 2 do
    if tonumber(redis.call('HGET', KEYS[12], jobs[i]) or '0') >= limit then
      return jobs, i, 0, true
    end
  end
  local best, most_held, unheld = 1, 0, nil
  for i = 1, #jobs, 2 do
    local count, anyone = held_by(worker, jobs[i])
    if count > most_held then best, most_held = i, count end
    if not anyone and not unheld then unheld = i end
  end
  if most_held == 0 and unheld then best = unheld end
  return jobs, best, most_held, false
end

local function drop(tenant)
  redis.call('LPOP', KEYS[7])
  redis.call('SREM', KEYS[8], tenant)
  redis.call('HDEL', KEYS[9], tenant)
end

local function rotate()
  redis.call('RPUSH', KEYS[7], redis.call('LPOP', KEYS[7]))
end

-- Take job ``at`` of ``jobs`` (its tenant's ``queue``) out of the backlog. A live one counts a
-- bypass on each job ahead of it and is returned (id, message, created); one ended, vanished
-- or overdue is dropped and noted, and nil returned.
local function take(queue, jobs, at)
  local id = jobs[at]
  redis.call('ZREM', queue, id)
  redis.call('HDEL', KEYS[12], id)
  local created = redis.call('ZSCORE', KEYS[5], id)
  redis.call('ZREM', KEYS[5], id)
  local message = redis.call('HGET', KEYS[6], id)
  redis.call('HDEL', KEYS[6], id)
  local raw = redis.call('GET', ARGV[5] .. id)
  if not (raw and message) then
    table.insert(skipped, id)
    return nil
  end
  local record = cjson.decode(raw)
  if record.status ~= 'queued' then
    table.insert(skipped, id)
    return nil
  end
  local deadline = nil
  for _, name in ipairs({'start_deadline', 'deadline'}) do
    local t = record[name]
    if type(t) == 'number' and (deadline == nil or t < deadline) then deadline = t end
  end
  if deadline ~= nil and now >= deadline then
    table.insert(overdue, id)
    return nil
  end
  for i = 1, at - 2, 2 do redis.call('HINCRBY', KEYS[12], jobs[i], 1) end
  return id, message, created
end

-- A job ``worker`` holds from a tenant other than the one whose turn it is, paid for from
-- that tenant's next turns: its deficit may go down to -borrow, so its share over time stays
-- its weight's and it is ahead by at most ``borrow`` jobs at any moment.
local function borrowed(worker)
  for _, other in ipairs(redis.call('LRANGE', KEYS[7], 1, 7)) do
    local owed = tonumber(redis.call('HGET', KEYS[9], other) or '0')
    if owed - 1 >= -borrow then
      local queue = ARGV[4] .. other
      local jobs, at, held, forced = choose(queue, worker)
      if held > 0 and not forced then
        local id, message, created = take(queue, jobs, at)
        if id then
          redis.call('HSET', KEYS[9], other, owed - 1)
          if redis.call('ZCARD', queue) == 0 then
            redis.call('LREM', KEYS[7], 1, other)
            redis.call('SREM', KEYS[8], other)
            redis.call('HDEL', KEYS[9], other)
          end
          return {id, message, jobs[at + 1], other, created}
        end
      end
    end
  end
  return nil
end

-- Deficit round robin: a tenant's turn adds its weight to its deficit; each job costs 1.
local function pick(worker)
  while budget > 0 do
    budget = budget - 1
    local tenant = redis.call('LINDEX', KEYS[7], 0)
    if not tenant then return nil end
    local queue = ARGV[4] .. tenant
    local jobs, at, held, forced = choose(queue, worker)
    if #jobs == 0 then
      drop(tenant)
    else
      local deficit = tonumber(redis.call('HGET', KEYS[9], tenant) or '0')
      if deficit < 1 then
        deficit = deficit + tonumber(redis.call('HGET', KEYS[10], tenant) or '1')
        redis.call('HSET', KEYS[9], tenant, deficit)
      end
      if deficit < 1 then
        rotate()
      else
        local other = worker and held == 0 and not forced and borrowed(worker)
        if other then return other end
        local id, message, created = take(queue, jobs, at)
        if id then
          deficit = deficit - 1
          redis.call('HSET', KEYS[9], tenant, deficit)
          if redis.call('ZCARD', queue) == 0 then drop(tenant)
          elseif deficit < 1 then rotate() end
          return {id, message, jobs[at + 1], tenant, created}
        end
      end
    end
  end
  return nil
end

while #taken < most and room() > 0 do
  local c = idle_worker()
  local job = pick(c and ARGV[13 + c] or nil)
  if not job then break end
  if ARGV[6] == 'claim' then
    redis.call('HSET', KEYS[11], job[1], cjson.encode({
      target = ARGV[7], at = ARGV[1], message = job[2], order = job[3], tenant = job[4],
      created = job[5], token = ARGV[9]}))
  else
    local queue = c and KEYS[12 + c] or KEYS[4]
    if apart then
      queue = c and ARGV[tail + 1] .. '.w.' .. ARGV[13 + c] or ARGV[tail + 1]
      if c then claim(KEYS[12 + c], ARGV[13 + c], now) end
    end
    local item = send(KEYS[4], at, queue, job[2])
    if apart then table.insert(sent, item) end
    redis.call('ZADD', KEYS[3], now, job[1])
    table.insert(placed, c and ARGV[13 + c] or '')
  end
  table.insert(taken, job[1])
end
return {taken, skipped, overdue, redis.call('ZCARD', KEYS[5]), placed, sent}
"""
)


@dataclass(frozen=True)
class HandoffSettings:
    """The hand-off when saturated: ``window`` head jobs of a tenant looked at per hand-off
    (1: no reordering), a job passed over ``bypass_limit`` times is taken next, a tenant may
    be ahead of its share by ``borrow`` jobs taken out of turn (0: never out of turn)."""

    enabled: bool = True
    window: int = 32
    bypass_limit: int = 16
    borrow: int = 1

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"handoff window must be >= 1, got {self.window}")
        if self.bypass_limit < 0:
            raise ValueError(f"handoff bypass_limit must be >= 0, got {self.bypass_limit}")
        if self.borrow < 0:
            raise ValueError(f"handoff borrow must be >= 0, got {self.borrow}")


@dataclass(frozen=True)
class Hints:
    """What the take script needs beyond the backlog's keys: the candidate workers and their
    direct queues (with the broker apart: the direct claims, once per worker), and per job at a
    tenant's head the holder sets of its things."""

    workers: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    holder_keys: list[str] = field(default_factory=list)
    jobs: dict[str, list[int]] = field(default_factory=dict)  # job -> indices in holder_keys


class HandoffHints:
    """Reads a region's workers and the head of each tenant's backlog for the take script;
    remembers each job's things, so an input is read once while its job waits."""

    def __init__(
        self,
        client: redis.Redis,
        region: str,
        queue: str,
        tenant_key: str,
        ring_key: str,
        apart: bool = False,
    ) -> None:
        self.redis, self.region, self.queue, self.apart = client, region, queue, apart
        self.tenant_key, self.ring_key = tenant_key, ring_key
        self.holdings = Holdings(client, region)
        self._things: dict[str, list[str]] = {}

    def read(self, window: int, most_tenants: int = 64) -> Hints:
        """The hints for one take; none when no worker with a direct queue looks idle."""
        now = time.time()
        name = self.region
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(WORKER_SET + name, now, "+inf")
            pipe.zrangebyscore(BUSY_SET + name, now, "+inf")
            pipe.smembers(DIRECT_QUEUES + name)
            pipe.lrange(self.ring_key, 0, most_tenants - 1)
            live_raw, busy_raw, direct_raw, ring_raw = pipe.execute()
        direct = {_text(w) for w in direct_raw}
        workers = sorted(w for w in map(_text, live_raw) if w in direct)
        queues = [
            claims_key(name) if self.apart else direct_queue_of(self.queue, worker)
            for worker in workers
        ]
        busy = {_text(w) for w in busy_raw}
        if not ring_raw or all(worker in busy for worker in workers):
            # Nobody to hand a job to now (one freeing meanwhile still gets the head).
            return Hints(workers, queues)
        with self.redis.pipeline(transaction=False) as pipe:
            for tenant in ring_raw:
                pipe.zrange(self.tenant_key + _text(tenant), 0, window - 1)
            heads = [_text(job) for jobs in pipe.execute() for job in jobs]
        self._remember(heads)
        holder_keys: list[str] = []
        index_of: dict[str, int] = {}
        jobs: dict[str, list[int]] = {}
        first = 13 + len(workers)  # KEYS before the holder sets: 12 fixed, then the queues
        for job in heads:
            for thing in self._things.get(job, []):
                if thing not in index_of:
                    index_of[thing] = first + len(holder_keys)
                    holder_keys.append(self.holdings.key(thing))
            jobs[job] = [index_of[thing] for thing in self._things.get(job, [])]
        return Hints(workers, queues, holder_keys, jobs)

    def _remember(self, heads: Sequence[str]) -> None:
        """Learn the things of the jobs not seen yet; forget the jobs no longer at a head."""
        self._things = {job: self._things[job] for job in heads if job in self._things}
        new = [job for job in heads if job not in self._things]
        if not new:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for job in new:
                pipe.get(JOB_KEY + job)
            answers = pipe.execute()
        for job, raw in zip(new, answers, strict=True):
            if raw is None:
                continue  # ended meanwhile: the script skips it
            params = JobRecord.model_validate_json(raw).params  # its digests came with it
            self._things[job] = things_of(params.image_sha256, params.addons)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
