"""``GET /v1/jobs/{id}/logs``: the lines every process wrote about one job, oldest first.

Lines are kept per region (a job that moved has lines in each region it passed through), so a
read merges the regions' lists by time. The SSE stream (:mod:`.events`) sends the same lines
as ``log`` events.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from animfleet.region.joblogs import MAX_LINES, JobLogs
from dispatcher.client import Client
from dispatcher.gateway import scoping
from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.views import error_responses, runtime_of

router = APIRouter(prefix="/v1")


class LogEntry(BaseModel):
    region: str = Field(description="the region whose processes wrote the line")
    seq: int = Field(description="1, 2, ... per job and region")
    timestamp: str | None = Field(description="ISO 8601, UTC")
    level: str | None
    event: str = Field(description="what happened, e.g. job.submitted, job.transition")
    fields: dict[str, Any] = Field(description="the line's other fields (secrets masked)")


class JobLog(BaseModel):
    job_id: str
    lines: list[LogEntry] = Field(description=f"the job's last {MAX_LINES} lines per region")


def read_lines(client: Client, job_id: str, after: dict[str, int] | None = None) -> list[LogEntry]:
    """``job_id``'s lines in every region past ``after`` (region -> last seq seen), by time."""
    entries = []
    for region in client.topology.names:
        seen = (after or {}).get(region, 0)
        for kept in JobLogs(client.store(region).redis).read(job_id, after=seen):
            line = dict(kept.line)
            entries.append(
                LogEntry(
                    region=region,
                    seq=kept.seq,
                    timestamp=line.pop("timestamp", None),
                    level=line.pop("level", None),
                    event=str(line.pop("event", "")),
                    fields=line,
                )
            )
    entries.sort(key=lambda entry: (entry.timestamp or "", entry.region, entry.seq))
    return entries


def delete_lines(client: Client, job_id: str) -> None:
    for region in client.topology.names:
        JobLogs(client.store(region).redis).delete(job_id)


@router.get(
    "/jobs/{job_id}/logs",
    response_model=JobLog,
    responses=error_responses(401, 404, 410, 429),
    operation_id="getJobLogs",
)
def job_logs(
    job_id: str,
    request: Request,
    caller: CallerDep,
    level: Annotated[
        str | None, Query(pattern="^(debug|info|warning|error|critical)$", description="minimum")
    ] = None,
) -> JobLog:
    """What the dispatcher, scheduler, worker, sweeper and webhook sender logged about the
    job: submission, placement, start, each state change, webhook deliveries, errors."""
    record = scoping.owned(request, caller, job_id)
    lines = read_lines(runtime_of(request).client, record.id)
    if level is not None:
        order = ["debug", "info", "warning", "error", "critical"]
        floor = order.index(level)
        lines = [e for e in lines if e.level in order and order.index(e.level) >= floor]
    return JobLog(job_id=job_id, lines=lines)
