"""Each job's own log: the lines every process writes about it, kept in the region's Redis.

A process that serves regions calls :func:`keep_job_logs` once per region: from then on each
enabled log line carrying ``job_id`` (dispatcher, scheduler, worker, sweeper, webhook sender)
is also appended to that job's list in the Redis of the region the line names (its ``region``
field, else the region in the job's id), capped at :data:`MAX_LINES` (the oldest go) and
living as long as a finished record. Lines are stored as logged, secrets already masked by
:mod:`animfleet.logs`, with URLs cut at their query string and tracebacks left out.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from animfleet import logs
from animfleet.region.keys import JOB_LOG_KEY, JOB_LOG_SEQ, RECORD_TTL_S
from animfleet.region.store_client import store_client
from animfleet.topology import Topology

MAX_LINES = 200
MAX_FIELD_CHARS = 500
PAUSE_AFTER_FAILURE_S = 5.0
_OMITTED = frozenset({"job_id", "exc_info", "stack_info", "_record", "_from_structlog"})
_URL = re.compile(r"(https?://[^\s?#]+)[?#]\S*")

# KEYS: the list, its sequence counter. ARGV: the line, the cap, the TTL. Returns the seq.
_APPEND = """
local seq = redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[1], seq .. ' ' .. ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return seq
"""


@dataclass(frozen=True)
class LogLine:
    seq: int  # 1, 2, ... per job and region: a stream sends the lines past the last it sent
    line: dict[str, Any]  # event, level, timestamp and the line's other fields


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        value = _URL.sub(r"\1", value)
        return value if len(value) <= MAX_FIELD_CHARS else value[: MAX_FIELD_CHARS - 3] + "..."
    if isinstance(value, bool | int | float) or value is None:
        return value
    return _clean(str(value))


def clean_line(event: dict[str, Any]) -> dict[str, Any]:
    """What of a log line a job's log keeps: plain values, no query strings, no tracebacks."""
    return {k: _clean(v) for k, v in event.items() if k not in _OMITTED}


class JobLogs:
    """Read and write job logs in one region's Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._append = client.register_script(_APPEND)

    def append(self, job_id: str, event: dict[str, Any]) -> int:
        line = json.dumps(clean_line(event), separators=(",", ":"), default=str)
        keys = [JOB_LOG_KEY + job_id, JOB_LOG_SEQ + job_id]
        return int(self._append(keys=keys, args=[line, MAX_LINES, RECORD_TTL_S]))

    def read(self, job_id: str, after: int = 0) -> list[LogLine]:
        """The job's kept lines with a sequence number past ``after``, oldest first."""
        found = []
        for raw in self.redis.lrange(JOB_LOG_KEY + job_id, 0, -1):
            text = raw.decode() if isinstance(raw, bytes) else raw
            seq, _, line = text.partition(" ")
            if int(seq) > after:
                found.append(LogLine(int(seq), json.loads(line)))
        return found

    def delete(self, job_id: str) -> None:
        self.redis.delete(JOB_LOG_KEY + job_id, JOB_LOG_SEQ + job_id)


def keep_job_logs(regions: dict[str, redis.Redis]) -> None:
    """From now on, copy this process's lines about a job into that job's log in the region
    the line names (``regions``: name -> that region's Redis). After a failed write, lines are
    not copied for :data:`PAUSE_AFTER_FAILURE_S`: a Redis outage never slows the process."""
    stores = {name: JobLogs(client) for name, client in regions.items()}
    paused_until = [0.0]

    def sink(job_id: str, event: dict[str, Any]) -> None:
        named = event.get("region")
        region = named if named in stores else job_id.partition(".")[0]
        if region not in stores and len(stores) == 1:
            region = next(iter(stores))
        if region not in stores or time.monotonic() < paused_until[0]:
            return
        try:
            stores[region].append(job_id, event)
        except redis.RedisError:
            paused_until[0] = time.monotonic() + PAUSE_AFTER_FAILURE_S

    logs.tee_job_lines("job-logs", sink)


def keep_job_logs_of(topology: Topology, names: Iterable[str]) -> None:
    """:func:`keep_job_logs` for the regions ``names`` of ``topology``."""
    keep_job_logs({n: store_client(topology.region(n).store) for n in names})
