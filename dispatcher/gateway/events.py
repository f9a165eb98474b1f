"""``GET /v1/jobs/{id}/events``: a job's live progress as Server-Sent Events.

The stream reads the job's record every ``ANIMFLEET_GATEWAY_EVENTS_POLL_S`` and sends what
changed (:mod:`dispatcher.progress`): queue position, start, each step, then the terminal
state with its output URL, after which it closes. ``Last-Event-ID`` resumes after that event.
Comment lines every ``..._EVENTS_HEARTBEAT_S`` keep proxies from closing a quiet stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from animfleet.jobs import JobRecord
from dispatcher.gateway import scoping
from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.joblog import read_lines
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.schemas import ErrorResponse
from dispatcher.gateway.views import render, runtime_of
from dispatcher.progress import Event, Progress
from dispatcher.tenancy import Tenancy

RECONNECT_MS = 1000  # what a browser waits before reconnecting a dropped stream
STREAM_MAX_S = 3600.0  # then the client reconnects with Last-Event-ID: no stream lives forever

router = APIRouter(prefix="/v1")

EVENTS_DOC = {
    "description": "`text/event-stream`: events `queued` (queue_position, estimated_start_at),"
    " `started`, `progress` (step, total), then one of `succeeded`, `failed`, `canceled`,"
    " `expired` carrying the job with its output URL, after which the stream ends. Each of"
    " these has an `id` to send back as `Last-Event-ID` when reconnecting. With `logs=true`,"
    " `log` events (no `id`) come between them, carrying the job's log lines as"
    " `GET /v1/jobs/{id}/logs` lists them; a reconnected stream sends the log from its start.",
    # Each event as a client parses it (the fields of the Server-Sent Events format).
    "content": {
        "text/event-stream": {
            "schema": {
                "type": "object",
                "properties": {
                    "event": {"type": "string"},
                    "data": {"type": "string", "description": "JSON"},
                    "id": {"type": "string"},
                    "retry": {"type": "integer"},
                },
            }
        }
    },
}


@router.get(
    "/jobs/{job_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: EVENTS_DOC,
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
        410: {"model": ErrorResponse},
        429: {"model": ErrorResponse},
    },
)
async def job_events(
    job_id: str,
    request: Request,
    caller: CallerDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
    logs: Annotated[bool, Query(description="also send the job's log lines")] = False,
) -> EventSourceResponse:
    """Follow one job live; resumable with ``Last-Event-ID``."""
    runtime = runtime_of(request)
    tenancy: Tenancy = request.app.state.tenancy
    # The first read answers 404 before the stream opens, for a missing job or another's.
    first = await anyio.to_thread.run_sync(scoping.owned, request, caller, job_id)
    stream = _stream(runtime, tenancy, first, caller.tenant, Progress(last_event_id), logs)
    return EventSourceResponse(
        stream,
        ping=runtime.settings.events_heartbeat_s,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(
    runtime: Runtime,
    tenancy: Tenancy,
    record: JobRecord,
    tenant: str,
    progress: Progress,
    logs: bool,
) -> AsyncIterator[ServerSentEvent]:
    poll_s = runtime.settings.events_poll_s
    first = True
    logged: dict[str, int] = {}  # region -> the last log line sent
    with anyio.move_on_after(STREAM_MAX_S):
        while True:
            lines = []
            if logs:
                lines = await anyio.to_thread.run_sync(
                    read_lines, runtime.client, record.id, logged
                )
            for line in lines:
                logged[line.region] = max(logged.get(line.region, 0), line.seq)
                yield ServerSentEvent(line.model_dump_json(), event="log")
            events = await anyio.to_thread.run_sync(_events, runtime, record, progress)
            for event in events:
                yield ServerSentEvent(
                    event.json(),
                    event=event.event,
                    id=event.id,
                    retry=RECONNECT_MS if first else None,
                )
                first = False
                if event.terminal:
                    return
            await anyio.sleep(poll_s)
            record = await anyio.to_thread.run_sync(tenancy.owned, record.id, tenant)


def _events(runtime: Runtime, record: JobRecord, progress: Progress) -> list[Event]:
    position, start_at = runtime.client.queue_estimate(record)
    terminal: dict[str, Any] | None = None
    if record.status.terminal:
        terminal = render(runtime, record, estimate=False).model_dump(mode="json")
    return progress.events(record, position, start_at, terminal)
