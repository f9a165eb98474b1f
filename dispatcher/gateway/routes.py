"""The ``/v1`` routes. Handlers are plain functions (run in a thread pool): they call the same
:class:`dispatcher.Client` a Python web backend uses."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response

from animfleet.jobs import JobRecord
from animfleet.jobview import JobView, job_view
from animfleet.region.status import RegionStatus
from dispatcher.client import JobHandle, WaitTimeout
from dispatcher.gateway.errors import ApiError
from dispatcher.gateway.images import resolve_image
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.schemas import ErrorResponse, JobRequest, Regions, RegionView, Replayed

PREFER_WAIT = re.compile(r"(?:^|[,;\s])wait(?:=(\d{1,6}))?(?:$|[,;\s])")
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (404, 409, 422, 429, 503)
}

router = APIRouter(prefix="/v1", responses=ERRORS)
PreferHeader = Annotated[
    str | None, Header(description="wait=N: answer when the job is terminal or after N <= 60 s")
]
IdempotencyHeader = Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)]


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _prefer_wait(prefer: str | None, runtime: Runtime) -> float | None:
    if not prefer:
        return None
    match = PREFER_WAIT.search(prefer.lower())
    if match is None:
        return None
    seconds = float(match.group(1)) if match.group(1) else runtime.settings.max_wait_s
    return min(seconds, runtime.settings.max_wait_s)


def _waited(runtime: Runtime, job_id: str, wait_s: float | None, response: Response) -> JobRecord:
    if wait_s is None:
        return runtime.client.get(job_id)
    response.headers["Preference-Applied"] = f"wait={wait_s:g}"
    try:
        return runtime.client.wait(job_id, timeout=wait_s)
    except WaitTimeout:
        return runtime.client.get(job_id)


def _view(runtime: Runtime, record: JobRecord) -> JobView:
    position, estimate = runtime.client.queue_estimate(record)
    return job_view(
        record,
        objects=runtime.objects(record.region),
        presign_expiry_s=runtime.client.topology.region(record.region).storage.presign_expiry_s,
        queue_position=position,
        estimated_start_at=estimate,
    )


def _region_view(name: str, status: RegionStatus) -> RegionView:
    return RegionView(
        name=name,
        live_workers=status.load.live_workers,
        busy_workers=status.load.busy_workers,
        queue_depth=status.load.queue_depth,
    )


def _submit(
    runtime: Runtime,
    body: JobRequest,
    response: Response,
    prefer: str | None,
    idempotency_key: str | None,
    job_id: str | None = None,
) -> JobView:
    client = runtime.client
    image = resolve_image(body.image, client.netguard, runtime.objects(runtime.settings.region))
    handle: JobHandle = client.submit(
        image,
        body.prompt,
        home_region=runtime.settings.region,
        idempotency_key=idempotency_key,
        job_id=job_id,
        **body.options(),
    )
    if not handle.created:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/jobs/{handle.id}"
    record = _waited(runtime, handle.id, _prefer_wait(prefer, runtime), response)
    response.status_code = 200 if record.status.terminal else 202
    return _view(runtime, record)


@router.post("/jobs", status_code=202, response_model=JobView)
def create_job(
    body: JobRequest,
    request: Request,
    response: Response,
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyHeader = None,
) -> JobView:
    """Enqueue a job. The same ``Idempotency-Key`` with the same body returns the same job
    (header ``Idempotent-Replayed: true``); with another body, 409 ``idempotency_conflict``."""
    return _submit(_runtime(request), body, response, prefer, idempotency_key)


@router.put("/jobs/{job_id}", status_code=202, response_model=JobView)
def put_job(
    job_id: str,
    body: JobRequest,
    request: Request,
    response: Response,
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyHeader = None,
) -> JobView:
    """Enqueue a job under a client-chosen id (1-64 of ``A-Za-z0-9_-``); idempotent: the same
    id with the same body returns that job, with another body 409."""
    return _submit(_runtime(request), body, response, prefer, idempotency_key, job_id=job_id)


@router.get("/jobs/{job_id}", response_model=JobView)
def get_job(
    job_id: str, request: Request, response: Response, prefer: PreferHeader = None
) -> JobView:
    """The job: status, queue position and estimated start while queued, progress while
    running, metrics, output with a freshly signed URL, error."""
    runtime = _runtime(request)
    record = _waited(runtime, job_id, _prefer_wait(prefer, runtime), response)
    return _view(runtime, record)


@router.post("/jobs/{job_id}/cancel", response_model=JobView)
def cancel_job(job_id: str, request: Request) -> JobView:
    """A queued job never starts; a running one stops at its next denoising step. A job that
    already ended is returned unchanged."""
    runtime = _runtime(request)
    return _view(runtime, runtime.client.cancel(job_id))


@router.post("/jobs/{job_id}/webhook/replay", status_code=202, response_model=Replayed)
def replay_webhook(job_id: str, request: Request) -> Replayed:
    """Send the job's most recent webhook event again (same ``webhook-id``)."""
    delivery = _runtime(request).client.replay_webhook(job_id)
    if delivery is None:
        raise ApiError(409, "no_webhook_event", f"job {job_id} has sent no webhook event")
    return Replayed(webhook_id=delivery.id, type=delivery.type)


@router.get("/regions", response_model=Regions)
def regions(request: Request) -> Regions:
    """Per region: live workers, busy workers, queued jobs."""
    runtime = _runtime(request)
    statuses = runtime.client.regions()
    return Regions(regions=[_region_view(name, status) for name, status in statuses.items()])
