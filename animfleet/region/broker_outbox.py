"""The transactional outbox between a region's store and a broker apart from it.

With the broker in the store (one Redis), a script that admits a job pushes its Celery message
onto the GPU queue in the same atomic call. With a broker apart (RabbitMQ, or a Redis of its
own), that push cannot join the store's transaction, so the scripts add the same message, with
its queue, to ``broker-outbox:<region>`` instead, atomically as before: a sorted set of
``"<queue> <message>"`` entries scored by the time from which the relay may publish them.

- **Fast path**: the process that ran the script publishes the entries it got back at once
  (:meth:`BrokerOutbox.deliver`: confirmed by the broker) and then removes them, so a job
  reaches its queue one broker round trip after admission.
- **Relay**: the region's scheduler (under its lease) publishes what is due
  (:meth:`BrokerOutbox.relay`): entries whose publisher died between the script and the
  publish, or whose broker was away; an entry is due :data:`GRACE_S` after it was added.
- **Deferrals**: a worker that must look at a delivery again later (its job's run is alive
  elsewhere) adds its message due then (:meth:`BrokerOutbox.defer`), since quorum queues hold
  no ETA messages.

A message published twice (a publisher that died after the publish, before the removal) is
delivered twice: harmless, as the run lease (:mod:`.runs`) lets one run of a job live at a time
and a delivery of a finished job does nothing.

- **Refusals**: an entry the broker refuses for good (:class:`.broker.BrokerRefused`: access
  refused, a queue declared with other arguments) is set aside in ``broker-quarantine:<region>``
  rather than retried forever; :meth:`BrokerOutbox.release_quarantined` puts the entries back
  once the cause is fixed. :meth:`BrokerOutbox.overdue_s` (the age of the oldest entry past its
  due time) and :meth:`BrokerOutbox.quarantined` are what the scheduler exports as metrics.
- **Dead letters**: a job whose message RabbitMQ dead-lettered (returned more often than its
  delivery limit) still has attempts left unless it started ``max_deliveries`` times or came
  back dead-lettered that often: it is queued again with a new message; otherwise it fails
  ``worker_lost``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis
import structlog

from animfleet.jobs import IllegalTransition, JobRecord, JobState
from animfleet.region.broker import BrokerLink, BrokerRefused, BrokerUnavailable
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.keys import BROKER_OUTBOX, BROKER_QUARANTINE, DEAD_LETTERED, DIRECT_CLAIMS
from animfleet.region.messages import AnimateMessages
from animfleet.region.runs import RunLeases
from animfleet.topology import Region

log = structlog.stdlib.get_logger("animfleet.broker_outbox")

# How long the process that added an entry has to publish it before the relay does.
GRACE_S = 3.0
# How long a worker handed a job through the outbox counts as having one in its direct queue
# (the scripts cannot read the broker's queue lengths): until then it is busy with it.
CLAIM_S = 3.0
# After a failed publish, the fast path leaves the broker alone this long.
RETRY_AFTER_S = 1.0
# How long a job's dead-letter count is kept (a day: far past any job's deadline).
DEAD_LETTER_COUNT_TTL_S = 86400


def outbox_key(region: str) -> str:
    return BROKER_OUTBOX + region


def claims_key(region: str) -> str:
    return DIRECT_CLAIMS + region


def entry(queue: str, message: str) -> str:
    """An outbox entry: queue names hold no space."""
    return f"{queue} {message}"


def split(raw: bytes | str) -> tuple[str, str]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    queue, _, message = text.partition(" ")
    return queue, message


# The scripts' side, for :mod:`.admission` and :mod:`.handoff_take`: ``send(queue, message)``
# pushes onto the queue (store is broker) or adds to the outbox whose key is ``outbox`` and
# entries' time ``at`` ('' = push); ``handed(claims, worker)`` whether a worker was handed a job
# through the outbox in the last CLAIM_S; ``claim`` marks it.
LUA_SEND = """
local function send(outbox, at, queue, message)
  if at == '' then
    redis.call('LPUSH', queue, message)
    return ''
  end
  local item = queue .. ' ' .. message
  redis.call('ZADD', outbox, tonumber(at), item)
  return item
end
local function handed(claims, worker, now)
  return tonumber(redis.call('HGET', claims, worker) or '0') > now
end
local function claim(claims, worker, now)
  redis.call('HSET', claims, worker, now + CLAIM_S)
end
""".replace("CLAIM_S", repr(CLAIM_S))


class BrokerOutbox:
    """One region's outbox and its publisher; only for a region whose broker is apart."""

    def __init__(self, store: JobStore, region: Region, link: BrokerLink | None = None) -> None:
        self.store, self.region = store, region
        self.redis: redis.Redis = store.redis
        self.key = outbox_key(region.name)
        self.link = link or BrokerLink(region)
        self.runs = RunLeases(store)
        self._down_until = 0.0  # monotonic time before which publishing is not tried

    @staticmethod
    def due_at(now: float | None = None) -> float:
        """The score of an entry the caller publishes itself: the relay's turn comes later."""
        return (time.time() if now is None else now) + GRACE_S

    def add(self, pipe: redis.client.Pipeline, queue: str, message: str) -> str:
        """Add ``message`` for ``queue`` inside the caller's transaction; returns the entry
        to :meth:`deliver` once it has committed."""
        item = entry(queue, message)
        pipe.zadd(self.key, {item: self.due_at()})
        return item

    def defer(self, queue: str, message: str, delay_s: float) -> None:
        """Publish ``message`` to ``queue`` in ``delay_s`` (by the relay)."""
        self.redis.zadd(self.key, {entry(queue, message): time.time() + delay_s})

    def deliver(self, items: Sequence[bytes | str]) -> int:
        """Publish ``items`` (confirmed) and remove each once published; returns how many.
        Stops at the first the broker refuses: the relay publishes the rest later."""
        done = 0
        if time.monotonic() < self._down_until:
            return 0  # it failed a moment ago: no submit waits on it again, the relay retries
        for item in items:
            queue, message = split(item)
            try:
                self.link.publish(queue, message)
            except BrokerRefused as error:
                self._quarantine(item, error)
                continue
            except BrokerUnavailable as error:
                log.warning("broker.publish_deferred", region=self.region.name, error=str(error))
                self._down_until = time.monotonic() + RETRY_AFTER_S
                break
            self.redis.zrem(self.key, item)
            done += 1
        return done

    def relay(self, now: float | None = None, most: int = 500) -> int:
        """Publish the entries due by ``now``; returns how many were published."""
        stamp = time.time() if now is None else now
        due: list[bytes] = self.redis.zrangebyscore(self.key, "-inf", stamp, start=0, num=most)  # type: ignore[assignment]
        published = self.deliver(due)
        if published:
            log.info("broker.relayed", region=self.region.name, messages=published)
        return published

    def pending(self) -> int:
        return int(self.redis.zcard(self.key))

    def overdue_s(self, now: float | None = None) -> float:
        """How long the oldest entry has been due and unpublished (0: none is)."""
        oldest = self.redis.zrange(self.key, 0, 0, withscores=True)
        if not oldest:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - float(oldest[0][1]))

    # -- refusals ------------------------------------------------------------------------------
    def _quarantine(self, item: bytes | str, error: BrokerRefused) -> None:
        text = item.decode() if isinstance(item, bytes) else item
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(self.quarantine_key, {text: time.time()})
        pipe.zrem(self.key, item)
        pipe.execute()
        queue, _ = split(item)
        log.error("broker.publish_refused", region=self.region.name, queue=queue, error=str(error))

    @property
    def quarantine_key(self) -> str:
        return BROKER_QUARANTINE + self.region.name

    def quarantined(self) -> int:
        return int(self.redis.zcard(self.quarantine_key))

    def release_quarantined(self) -> int:
        """Put every quarantined entry back in the outbox, due now; returns how many."""
        items: list[bytes] = self.redis.zrange(self.quarantine_key, 0, -1)  # type: ignore[assignment]
        if not items:
            return 0
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(self.key, dict.fromkeys(items, time.time()))
        pipe.zrem(self.quarantine_key, *items)
        pipe.execute()
        return len(items)

    # -- dead letters --------------------------------------------------------------------------
    def end_dead_letters(self, max_deliveries: int = 3) -> dict[str, str]:
        """Queue again, or fail, the jobs whose message the broker dead-lettered, unless a run
        of theirs is alive or they ended; returns job id -> ``queued`` or ``failed``."""
        handled: dict[str, str] = {}
        sent: list[str] = []  # published once the dead letters are taken (the link is busy)

        def handle(job_id: str) -> None:
            if job_id and (outcome := self._dead_letter(job_id, max_deliveries, sent)):
                handled[job_id] = outcome

        try:
            self.link.take_dead(handle)
        except BrokerUnavailable as error:
            log.warning("broker.dead_letters_unread", region=self.region.name, error=str(error))
        self.deliver(sent)
        return handled

    def _dead_letter(self, job_id: str, max_deliveries: int, sent: list[str]) -> str | None:
        counter = DEAD_LETTERED + job_id
        returned = int(self.redis.incr(counter))
        self.redis.expire(counter, DEAD_LETTER_COUNT_TTL_S)

        def change(record: JobRecord) -> None:
            if record.status.terminal or self.runs.live(record):
                raise IllegalTransition(f"job {record.id} is {record.status.value}")
            if max(record.attempts, returned) >= max_deliveries:
                message = "its message was returned by workers past the broker's delivery limit"
                record.end(JobState.FAILED, "worker_lost", message)
            elif record.status is JobState.RUNNING:  # its run's lease lapsed
                record.run = None  # the lost run's writes are refused from now on
                record.transition(JobState.QUEUED)
                record.worker, record.progress.step = None, 0

        mine: list[str] = []

        def push(pipe: redis.client.Pipeline, record: JobRecord) -> None:
            mine.clear()  # a retried transaction adds its entry anew
            if record.status is JobState.QUEUED:
                message = AnimateMessages(self.region).for_job(record.id)
                mine.append(self.add(pipe, self.region.queue, message))
            else:
                pipe.delete(counter)

        try:
            record = self.store.update(job_id, change, also=push, watch=(RunLeases.key(job_id),))
        except (IllegalTransition, JobNotFound):
            return None
        sent.extend(mine)
        outcome = record.status.value
        log.warning("job.dead_lettered", job_id=job_id, region=self.region.name, now=outcome)
        return outcome
