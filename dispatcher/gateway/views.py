"""Rendering a record for the caller, shared by the routers added beside ``routes``."""

from __future__ import annotations

from fastapi import Request

from animfleet.jobs import JobRecord
from animfleet.jobview import JobView, job_view
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.schemas import ErrorResponse


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def render(runtime: Runtime, record: JobRecord, estimate: bool = True) -> JobView:
    """The job as the API shows it: a fresh output URL, its queue position while queued."""
    position, start_at = runtime.client.queue_estimate(record) if estimate else (None, None)
    return job_view(
        record,
        objects=runtime.objects(record.region),
        presign_expiry_s=runtime.client.topology.region(record.region).storage.presign_expiry_s,
        queue_position=position,
        estimated_start_at=start_at,
    )


def error_responses(*codes: int) -> dict[int | str, dict[str, object]]:
    """The OpenAPI ``responses`` of a route that may answer these error codes."""
    return {code: {"model": ErrorResponse} for code in codes}
