"""Job records in a region's Redis: created by the dispatcher, advanced by workers.

A record is created only by the region's atomic admission script
(:mod:`animfleet.region.admission`), which stores the record and its input with its queue
message (onto a GPU queue) or its backlog entry in one call. It is changed only by
:meth:`JobStore.update`, which writes the change and the webhook events it causes
(:mod:`animfleet.region.outbox`) in one transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

import redis
from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_random_exponential

from animfleet.errors import PermanentError
from animfleet.jobs import IllegalTransition, JobRecord, JobState
from animfleet.region import outbox
from animfleet.region.archive import RecordArchive
from animfleet.region.keys import (
    FINISHED_SET,
    HOLDING_SET,
    IDEMPOTENCY_KEY,
    INPUT_KEY,
    JOB_KEY,
    QUEUED_SET,
    RECORD_TTL_S,
    RUN_TIMES,
    RUNNING_SET,
    START_BY_SET,
    WAITING_SET,
)
from animfleet.region.store_client import store_client

IDEMPOTENCY_TTL_S = 24 * 3600
RECENT_RUNS = 50  # run times kept per region for the start estimate
# How long reads and updates of a record keep retrying while the region's Redis is unreachable
# (a restart or failover takes seconds): a worker that gives up too early strands its job.
RETRY_S = 30.0
TRANSIENT = (redis.ConnectionError, redis.TimeoutError)


class JobNotFound(PermanentError, KeyError):
    """No record with that id in the region its id names."""


class IdempotencyConflict(PermanentError, ValueError):
    """An idempotency key (or client-chosen id) was used before with a different request."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(
            f"key {key!r} was already used for job {job_id} with a different request body; "
            "use a new key for a new request"
        )
        self.key = key
        self.job_id = job_id


class JobStore:
    """Reads and writes the records of one region.

    Updates are optimistic transactions (WATCH/MULTI), so a worker's progress write and a user's
    cancel never overwrite each other; :meth:`JobRecord.transition` decides what is legal.
    """

    def __init__(self, client: redis.Redis, retry_s: float = RETRY_S) -> None:
        self.redis = client
        self.retry_s = retry_s

    @classmethod
    def from_url(cls, url: str, retry_s: float = RETRY_S) -> JobStore:
        return cls(store_client(url), retry_s)

    def _retrying(self) -> Retrying:
        """Full-jitter retries of a connection failure for up to ``retry_s``, then re-raise."""
        return Retrying(
            retry=retry_if_exception_type(TRANSIENT),
            wait=wait_random_exponential(multiplier=0.1, max=2.0),
            stop=stop_before_delay(self.retry_s),
            reraise=True,
        )

    def get(self, job_id: str) -> JobRecord:
        raw = self._retrying()(self.redis.get, JOB_KEY + job_id)
        if raw is None:
            raise JobNotFound(job_id)
        return JobRecord.model_validate_json(raw)

    def running(self, region: str) -> list[JobRecord]:
        """The records of ``region``'s running jobs, in two round trips; ids whose record is
        gone or no longer running are dropped from the set."""
        ids = [_text(raw) for raw in self.redis.zrange(RUNNING_SET + region, 0, -1)]
        found = self.redis.mget([JOB_KEY + job_id for job_id in ids]) if ids else []
        records = [JobRecord.model_validate_json(raw) for raw in found if raw is not None]
        running = [record for record in records if record.status is JobState.RUNNING]
        stale = set(ids) - {record.id for record in running}
        if stale:
            self.redis.zrem(RUNNING_SET + region, *stale)
        return running

    def input_image(self, job_id: str) -> bytes | None:
        raw = self._retrying()(self.redis.get, INPUT_KEY + job_id)
        return raw if isinstance(raw, bytes) else None

    def update(
        self,
        job_id: str,
        change: Callable[[JobRecord], None],
        also: Callable[[redis.client.Pipeline, JobRecord], None] | None = None,
        watch: Sequence[str] = (),
    ) -> JobRecord:
        """Apply ``change`` to the current record atomically and return the new record.

        ``change`` may raise (e.g. :class:`IllegalTransition`); then nothing is written.
        ``also`` adds commands to the same transaction (a requeue pushes the job's message).
        ``watch`` names more keys the write depends on: they are WATCHed before ``change`` runs,
        so ``change`` may read them, and nothing is written if one changed meanwhile.
        Once the record is terminal, its input bytes are dropped. A connection failure is
        retried for up to ``retry_s`` (``change`` then runs again on the record as it is).
        """
        key = JOB_KEY + job_id

        def apply(pipe: redis.client.Pipeline) -> JobRecord:
            raw = pipe.get(key)
            if raw is None:
                raise JobNotFound(job_id)
            record = JobRecord.model_validate_json(raw)
            before = record.model_copy(deep=True)
            change(record)
            pipe.multi()
            outbox.emit(pipe, before, record)  # may stamp the record: before it is written
            pipe.set(key, record.model_dump_json(), ex=RECORD_TTL_S)
            if record.status is not JobState.QUEUED:
                pipe.zrem(QUEUED_SET + record.region, job_id)
                pipe.zrem(START_BY_SET + record.region, job_id)
            elif before.status is not JobState.QUEUED:  # requeued: back in line, by age
                pipe.zadd(QUEUED_SET + record.region, {job_id: record.created_at})
                if record.deadline is not None:  # expired while it waits, like any queued job
                    pipe.zadd(START_BY_SET + record.region, {job_id: record.deadline})
            if record.status is JobState.RUNNING:  # where the sweeper looks for lost workers
                pipe.zadd(RUNNING_SET + record.region, {job_id: record.started_at or 0.0})
            else:
                pipe.zrem(RUNNING_SET + record.region, job_id)
            if also is not None:
                also(pipe, record)
            if record.status.terminal:
                pipe.delete(INPUT_KEY + job_id)
                pipe.zrem(HOLDING_SET + record.home_region, job_id)
                finished = record.completed_at or time.time()
                pipe.zadd(FINISHED_SET + record.region, {job_id: finished}, nx=True)
            if record.status is JobState.SUCCEEDED and before.status is not JobState.SUCCEEDED:
                run_time = (record.completed_at or 0.0) - (record.started_at or 0.0)
                pipe.lpush(RUN_TIMES + record.region, run_time)
                pipe.ltrim(RUN_TIMES + record.region, 0, RECENT_RUNS - 1)
            return record

        # redis-py types the callable as returning None; with value_from_callable it is ours.
        result = self._retrying()(
            self.redis.transaction,
            apply,
            key,
            *watch,
            value_from_callable=True,
        )
        assert isinstance(result, JobRecord)
        return result

    # -- finished records leave Redis ------------------------------------------------------
    def finished_before(self, region: str, before: float, limit: int = 500) -> list[str]:
        """Ids of ``region``'s jobs that ended before ``before``, oldest first."""
        raw = self.redis.zrangebyscore(FINISHED_SET + region, "-inf", before, start=0, num=limit)
        return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]

    def finished_between(self, region: str, after: float, until: float) -> list[str]:
        """Ids of ``region``'s jobs that ended after ``after`` and by ``until``, oldest first."""
        raw = self.redis.zrangebyscore(FINISHED_SET + region, f"({after!r}", until)
        return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]

    def archive(self, job_id: str, region: str, archive: RecordArchive) -> bool:
        """Move a finished record to ``archive`` and out of Redis; False if it is not a
        finished record here. A record changed meanwhile is read and written again."""
        key = JOB_KEY + job_id
        moved: list[bool] = []

        def move(pipe: redis.client.Pipeline) -> None:  # run again if the record changes
            moved.clear()
            raw = pipe.get(key)
            record = None if raw is None else JobRecord.model_validate_json(raw)
            finished = record is not None and record.status.terminal
            deliveries = outbox.deliveries_of(pipe, job_id)
            if finished and outbox.any_pending(pipe, deliveries):
                return  # a webhook still being retried needs the record: a later pass
            if record is not None and finished:
                archive.put(record)  # written before the delete: a record is never in neither
            pipe.multi()
            if finished:
                pipe.delete(key, INPUT_KEY + job_id)
                outbox.forget(pipe, job_id, deliveries)  # nothing left to replay from Redis
            pipe.zrem(FINISHED_SET + region, job_id)
            moved.append(finished)

        self.redis.transaction(move, key)
        return bool(moved and moved[0])

    def erase(self, job_id: str, region: str) -> None:
        """Remove a terminal job's record, input and kept webhook events from Redis at once
        (the job was deleted: nothing is archived). The idempotency entry naming it stays."""
        key = JOB_KEY + job_id

        def drop(pipe: redis.client.Pipeline) -> None:
            raw = pipe.get(key)
            if raw is not None and not JobRecord.model_validate_json(raw).status.terminal:
                raise IllegalTransition(f"job {job_id} is not terminal; cancel it first")
            deliveries = outbox.deliveries_of(pipe, job_id)
            pipe.multi()
            pipe.delete(key, INPUT_KEY + job_id)
            outbox.forget(pipe, job_id, deliveries)
            pipe.zrem(FINISHED_SET + region, job_id)

        self.redis.transaction(drop, key)

    # -- the queue as users see it ---------------------------------------------------------
    def queue_position(self, record: JobRecord) -> int | None:
        """0 for the next job to start in its region; ``None`` once it is no longer queued."""
        rank = self.redis.zrank(QUEUED_SET + record.region, record.id)
        return rank if isinstance(rank, int) else None

    def queue_depth(self, region: str) -> int:
        return int(self.redis.zcard(QUEUED_SET + region))

    def mean_run_time(self, region: str) -> float | None:
        """Mean seconds from start to success over the region's recent jobs."""
        recent = [float(raw) for raw in self.redis.lrange(RUN_TIMES + region, 0, -1)]
        return sum(recent) / len(recent) if recent else None

    def expire_overdue(self, region: str, now: float | None = None) -> list[str]:
        """End as ``expired`` every queued job of ``region`` whose start deadline has passed.

        Runs without a GPU; the worker that later receives such a job skips it.
        """
        now = time.time() if now is None else now
        expired: list[str] = []
        for raw in self.redis.zrangebyscore(START_BY_SET + region, "-inf", now):
            job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            try:
                self.update(job_id, lambda record: expire_if_overdue(record, now))
            except JobNotFound:
                pass
            except IllegalTransition:
                continue
            else:
                expired.append(job_id)
            self.redis.zrem(START_BY_SET + region, job_id)
        return expired

    # -- demand waiting for room ---------------------------------------------------------------
    def hold_waiting(self, home: str, token: str, lapse: float) -> None:
        """Count one job of ``home`` as waiting at a dispatcher until it is placed or until
        ``lapse`` (so an entry of a dispatcher that died expires by itself)."""
        self.redis.zadd(WAITING_SET + home, {token: lapse})

    def release_waiting(self, home: str, token: str) -> None:
        self.redis.zrem(WAITING_SET + home, token)

    # -- idempotency -----------------------------------------------------------------------
    @staticmethod
    def idempotency_slot(key: str) -> tuple[str, int]:
        """The Redis key and lifetime that bind ``key`` ("id:..." or "key:...") to a job."""
        # A client-chosen id ("id:...") is how its record is found: it lives as long as the record.
        ttl = RECORD_TTL_S if key.startswith("id:") else IDEMPOTENCY_TTL_S
        return IDEMPOTENCY_KEY + key, ttl

    @staticmethod
    def idempotency_entry(job_id: str, region: str, fingerprint: str) -> str:
        return json.dumps({"job_id": job_id, "region": region, "fingerprint": fingerprint})

    @staticmethod
    def earlier_job(key: str, raw: bytes | str, fingerprint: str | None) -> tuple[str, str]:
        """(job id, region) of a bound entry; :class:`IdempotencyConflict` if the request
        differs (``fingerprint``)."""
        entry = json.loads(raw)
        if fingerprint is not None and entry["fingerprint"] != fingerprint:
            raise IdempotencyConflict(key.partition(":")[2], entry["job_id"])
        return str(entry["job_id"]), str(entry["region"])

    def claim_idempotency_key(
        self, key: str, job_id: str, region: str, fingerprint: str
    ) -> tuple[str, str] | None:
        """Bind ``key`` to a new job unless it is bound already; returns the earlier
        (job id, region).

        Raises :class:`IdempotencyConflict` if the key was used for a different request
        (``fingerprint`` differs).
        """
        slot, ttl = self.idempotency_slot(key)
        entry = self.idempotency_entry(job_id, region, fingerprint)
        if self.redis.set(slot, entry, nx=True, ex=ttl):
            return None
        found = self.idempotent_job(key, fingerprint)
        if found is None:  # expired between the two commands: bind it now
            return self.claim_idempotency_key(key, job_id, region, fingerprint)
        return found

    def idempotent_job(self, key: str, fingerprint: str | None = None) -> tuple[str, str] | None:
        """The (job id, region) bound to ``key``, checking ``fingerprint`` when given."""
        raw = self.redis.get(IDEMPOTENCY_KEY + key)
        if raw is None:
            return None
        return self.earlier_job(key, raw, fingerprint)

    def release_idempotency_key(self, key: str) -> None:
        self.redis.delete(IDEMPOTENCY_KEY + key)


def expire_if_overdue(record: JobRecord, now: float) -> None:
    """The change that expires a queued job past its start deadline (else refuses)."""
    if not record.start_overdue(now):
        raise IllegalTransition(f"job {record.id} is {record.status.value}, not overdue")
    if record.attempts:  # it ran, lost its worker, and waited past its deadline to run again
        message = "its deadline passed while it waited to run again"
        record.end(JobState.CANCELED, "deadline_exceeded", message)
        return
    record.end(
        JobState.EXPIRED, "start_deadline_exceeded", "no GPU started the job before its deadline"
    )


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
