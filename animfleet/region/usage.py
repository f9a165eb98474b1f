"""What each tenant used, by day: kept in object storage, beyond Redis's week.

Each region's sweeper rolls its finished jobs up, a pass at a time, into one object per tenant,
day (UTC, of the job's end) and region: ``<prefix>usage/<tenant>/<day>/<region>.json``. A
pass reads the jobs that ended since its cursor (:data:`USAGE_CURSOR`) and what deletions
noted meanwhile (:data:`USAGE_PENDING`), adds them to the day's object, then moves the cursor.
A deleted job that had not been rolled up yet is counted when it is deleted, so every job is
counted once. A sweeper stopped between writing an object and moving its cursor counts that
pass's jobs again (at most one pass: a second or so of jobs).
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterable

import redis
from pydantic import BaseModel, Field

from animfleet.jobs import JobRecord, JobState
from animfleet.region.archive import Objects
from animfleet.region.jobstore import JobNotFound, JobStore
from animfleet.region.keys import USAGE_CURSOR, USAGE_PENDING

CONTENT_TYPE = "application/json"
OUTCOMES = ("succeeded", "failed", "canceled", "expired")
LAG_S = 1.0  # a job is rolled up this long after it ended: its record is final by then


class DayUsage(BaseModel):
    """One tenant's use on one day (in one region, or summed over regions)."""

    day: str = Field(description="YYYY-MM-DD, UTC, of the jobs' end")
    jobs: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    gpu_seconds: float = Field(default=0.0, description="from start to end of each job's run")
    frame_pixels: int = Field(default=0, description="frames x width x height of outputs")
    output_bytes: int = 0
    deleted: int = Field(default=0, description="jobs deleted by request")
    retention_deleted: int = Field(default=0, description="jobs deleted by the retention")

    def add(self, other: DayUsage) -> None:
        for outcome, count in other.jobs.items():
            self.jobs[outcome] = self.jobs.get(outcome, 0) + count
        self.gpu_seconds += other.gpu_seconds
        self.frame_pixels += other.frame_pixels
        self.output_bytes += other.output_bytes
        self.deleted += other.deleted
        self.retention_deleted += other.retention_deleted


def day_of(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d")


def job_usage(record: JobRecord) -> DayUsage:
    """What one finished job counts for."""
    ended = record.completed_at or record.created_at
    usage = DayUsage(day=day_of(ended))
    usage.jobs[record.status.value] = 1
    if record.started_at is not None:
        usage.gpu_seconds = max(0.0, ended - record.started_at)
    if record.status is JobState.SUCCEEDED and record.output is not None:
        output = record.output
        usage.frame_pixels = output.frames * output.width * output.height
        usage.output_bytes = output.bytes
    return usage


class UsageBook:
    """One region's roll-ups: written by its sweeper, noted by deletions, read by the API."""

    def __init__(self, store: JobStore, region: str, objects: Objects, prefix: str = "") -> None:
        self.store, self.region, self.objects, self.prefix = store, region, objects, prefix
        self.redis: redis.Redis = store.redis

    def key(self, tenant: str, day: str) -> str:
        return f"{self.prefix}usage/{tenant}/{day}/{self.region}.json"

    # -- writing --------------------------------------------------------------------------
    def note_deleted(self, record: JobRecord, by_retention: bool = False) -> None:
        """Count a job being deleted (and the job itself, if no pass has counted it yet)."""
        usage = DayUsage(day=day_of(time.time()))
        if by_retention:
            usage.retention_deleted = 1
        else:
            usage.deleted = 1
        pending = [(record.tenant, usage)]
        ended = record.completed_at or record.created_at
        if ended > self._cursor():
            pending.append((record.tenant, job_usage(record)))
        with self.redis.pipeline(transaction=False) as pipe:
            for tenant, each in pending:
                pipe.rpush(USAGE_PENDING + self.region, json.dumps([tenant, each.model_dump()]))
            pipe.execute()

    def roll_up(self, now: float | None = None) -> list[JobRecord]:
        """Add what ended since the last pass, and what deletions noted, to the day objects;
        the jobs counted. Called by the region's sweeper only."""
        now = time.time() if now is None else now
        cursor = self._cursor()
        until = now - LAG_S
        totals: dict[tuple[str, str], DayUsage] = {}
        counted = []
        for job_id in self.store.finished_between(self.region, cursor, until):
            try:
                record = self.store.get(job_id)
            except JobNotFound:  # deleted meanwhile: counted when it was
                continue
            _merge(totals, record.tenant, job_usage(record))
            counted.append(record)
        notes = self.redis.lrange(USAGE_PENDING + self.region, 0, -1)
        for note in notes:
            tenant, fields = json.loads(note)
            _merge(totals, tenant, DayUsage.model_validate(fields))
        for (tenant, day), added in totals.items():
            current = self.read_object(tenant, day) or DayUsage(day=day)
            current.add(added)
            body = current.model_dump_json().encode()
            self.objects.put(self.key(tenant, day), body, CONTENT_TYPE)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(USAGE_CURSOR + self.region, repr(until))
            pipe.ltrim(USAGE_PENDING + self.region, len(notes), -1)
            pipe.execute()
        return counted

    def _cursor(self) -> float:
        raw = self.redis.get(USAGE_CURSOR + self.region)
        return float(raw) if raw is not None else 0.0

    # -- reading --------------------------------------------------------------------------
    def read_object(self, tenant: str, day: str) -> DayUsage | None:
        try:
            return DayUsage.model_validate_json(self.objects.get(self.key(tenant, day)))
        except Exception:  # none yet (each backend names a missing object its own way)
            return None

    def days(self, tenant: str, first: str, last: str) -> list[DayUsage]:
        """``tenant``'s days from ``first`` to ``last`` (YYYY-MM-DD, inclusive) in this region."""
        found = []
        for key in self.objects.list_keys(f"{self.prefix}usage/{tenant}/"):
            day = key[len(f"{self.prefix}usage/{tenant}/") :].split("/")[0]
            if first <= day <= last and key.endswith(f"/{self.region}.json"):
                usage = self.read_object(tenant, day)
                if usage is not None:
                    found.append(usage)
        return found


def fleet_days(books: Iterable[UsageBook], tenant: str, first: str, last: str) -> list[DayUsage]:
    """``tenant``'s days from ``first`` to ``last`` summed over the regions of ``books``,
    one per day with any use, in order."""
    by_day: dict[str, DayUsage] = {}
    for book in books:
        for usage in book.days(tenant, first, last):
            by_day.setdefault(usage.day, DayUsage(day=usage.day)).add(usage)
    return [by_day[day] for day in sorted(by_day)]


def _merge(totals: dict[tuple[str, str], DayUsage], tenant: str, usage: DayUsage) -> None:
    totals.setdefault((tenant, usage.day), DayUsage(day=usage.day)).add(usage)
