"""The ``/v1`` routes. Handlers are plain functions (run in a thread pool): they call the same
:class:`dispatcher.Client` a Python web backend uses."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response

from animfleet.errors import AnimfleetError
from animfleet.jobs import JobRecord, public_job_id
from animfleet.jobview import JobView, job_view
from animfleet.region.jobstore import IdempotencyConflict, JobNotFound
from animfleet.region.status import RegionStatus
from animfleet_api.bounds import MAX_IDEMPOTENCY_KEY_CHARS, MAX_PREFER_WAIT_S
from animfleet_api.request import BatchRequest, JobRequest
from dispatcher.client import JobHandle
from dispatcher.gateway import scoping
from dispatcher.gateway.auth import Caller, CallerDep
from dispatcher.gateway.errors import ApiError, as_api_error
from dispatcher.gateway.images import resolve_addon_images, resolve_image, upload_keys_in
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.schemas import (
    BatchResponse,
    BatchResult,
    ErrorBody,
    ErrorResponse,
    Regions,
    RegionView,
    Replayed,
    client_options,
)
from dispatcher.inputs import InvalidInput
from dispatcher.lookup import CLIENT_JOB_ID, WaitTimeout

PREFER_WAIT = re.compile(r"(?:^|[,;\s])wait(?:=(\d{1,6}))?(?:$|[,;\s])")
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse, **({"headers": RETRY_AFTER} if code in (429, 503) else {})}
    for code in (400, 401, 404, 409, 413, 422, 429, 503)
}

router = APIRouter(prefix="/v1", responses=ERRORS)
PreferHeader = Annotated[
    str | None,
    Header(
        description=f"wait=N: answer when the job is terminal or after N <= {MAX_PREFER_WAIT_S} s"
    ),
]
IdempotencyHeader = Annotated[
    str | None, Header(alias="Idempotency-Key", max_length=MAX_IDEMPOTENCY_KEY_CHARS)
]
_HEADERS = {
    "Location": {"description": "/v1/jobs/{id}", "schema": {"type": "string"}},
    "Idempotent-Replayed": {"description": "true: an earlier job", "schema": {"type": "string"}},
}
# What a client (and Schemathesis' stateful tests) can do next with the job a submit returns.
_JOB_LINKS = {
    name: {"operationId": operation, "parameters": {"job_id": "$response.body#/id"}}
    for name, operation in (
        ("GetJob", "getJob"),
        ("GetJobLogs", "getJobLogs"),
        ("CancelJob", "cancelJob"),
        ("DeleteJob", "deleteJob"),
    )
}
# 202 is the declared status; 200 when ``Prefer: wait`` saw the job finish.
SUBMITTED: dict[int | str, dict[str, Any]] = {
    200: {
        "model": JobView,
        "description": "finished within Prefer: wait",
        "headers": _HEADERS,
        "links": _JOB_LINKS,
    },
    202: {"description": "accepted", "headers": _HEADERS, "links": _JOB_LINKS},
    410: {"model": ErrorResponse, "description": "the job (or the one its key named) was deleted"},
}
# A job id's routes: an erased job answers 410 ``deleted`` for as long as its tombstone lives.
GONE: dict[int | str, dict[str, Any]] = {
    410: {"model": ErrorResponse, "description": "the job was deleted"}
}


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


def _waited(
    runtime: Runtime, record: JobRecord, wait_s: float | None, response: Response
) -> JobRecord:
    """``record`` (read and owned by the caller), or as it is once terminal or ``wait_s`` on."""
    job_id = record.id
    if wait_s is None or record.status.terminal:
        return record
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
        backlog=status.backlog,
        scaling_signal=status.scaling_signal,
    )


def _submit(
    request: Request,
    caller: Caller,
    body: JobRequest,
    response: Response,
    prefer: str | None,
    idempotency_key: str | None,
    job_id: str | None = None,
) -> JobView:
    runtime = _runtime(request)
    client = runtime.client
    options = scoping.submit_options(caller, client_options(body))
    options.update(scoping.tenancy_of(request).admission(caller.tenant))  # 429s before a fetch
    image = resolve_image(
        body.image,
        client.netguard,
        runtime.objects(runtime.settings.region),
        runtime.fetch_slots,
        caller.tenant,
    )
    if body.mask is not None:
        options["mask"] = resolve_image(
            body.mask,
            client.netguard,
            runtime.objects(runtime.settings.region),
            runtime.fetch_slots,
            caller.tenant,
            field="mask",
        )
    resolve_addon_images(
        options,
        client.netguard,
        runtime.objects(runtime.settings.region),
        runtime.fetch_slots,
        caller.tenant,
    )
    try:
        handle: JobHandle = client.submit(
            image,
            body.prompt,
            home_region=runtime.home,
            idempotency_key=scoping.scoped_key(caller, idempotency_key),
            job_id=job_id,
            uploads=sorted(upload_keys_in(body.model_dump())),  # recorded with the new job
            **options,
        )
    except IdempotencyConflict as conflict:  # name the earlier job as its tenant knows it
        earlier = public_job_id(conflict.job_id, caller.tenant)
        raise IdempotencyConflict(conflict.key, earlier) from None
    try:
        record = handle.record or client.get(handle.id)  # a new job's record came back with it
    except JobNotFound:  # an idempotent repeat of a deleted job's submit
        scoping.if_deleted(request, caller, handle.id, public_job_id(handle.id, caller.tenant))
        raise
    scoping.admitted(caller, record)
    if not handle.created:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/jobs/{public_job_id(handle.id, record.tenant)}"
    record = _waited(runtime, record, _prefer_wait(prefer, runtime), response)
    response.status_code = 200 if record.status.terminal else 202
    return _view(runtime, record)


@router.post("/jobs", status_code=202, response_model=JobView, responses=SUBMITTED)
def create_job(
    body: JobRequest,
    request: Request,
    response: Response,
    caller: CallerDep,
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyHeader = None,
) -> JobView:
    """Enqueue a job. The same ``Idempotency-Key`` with the same body returns the same job
    (header ``Idempotent-Replayed: true``); with another body, 409 ``idempotency_conflict``."""
    return _submit(request, caller, body, response, prefer, idempotency_key)


@router.post("/jobs/batch", response_model=BatchResponse)
def create_jobs(body: BatchRequest, request: Request, caller: CallerDep) -> BatchResponse:
    """Enqueue up to 500 jobs in one request, each with its own ``idempotency_key``. The
    answer lists, in order, each item's status (202, 200 for an idempotent repeat, or the
    error's code: 422, 409, 429 ``backlog_full``, 503) with its job or its error."""
    runtime = _runtime(request)
    client = runtime.client
    objects = runtime.objects(runtime.settings.region)
    # The tenant's in-flight limit counts the whole batch (429 for all of it), its backlog
    # cap each item.
    limits = scoping.tenancy_of(request).admission(caller.tenant, jobs=len(body.jobs))
    results: list[BatchResult | None] = []
    items = []
    for item in body.jobs:
        try:
            image = resolve_image(
                item.image, client.netguard, objects, runtime.fetch_slots, caller.tenant
            )
            mask = None
            if item.mask is not None:
                mask = resolve_image(
                    item.mask, client.netguard, objects, runtime.fetch_slots, caller.tenant, "mask"
                )
        except AnimfleetError as error:
            results.append(_failed(error))
            continue
        try:
            options = scoping.submit_options(caller, client_options(item))
            resolve_addon_images(
                options, client.netguard, objects, runtime.fetch_slots, caller.tenant
            )
        except (ApiError, AnimfleetError) as error:
            results.append(_failed(error))
            continue
        results.append(None)
        fields = {
            "idempotency_key": scoping.scoped_key(caller, item.idempotency_key),
            "uploads": sorted(upload_keys_in(item.model_dump())),
            **options,
            **limits,
        }
        items.append({"image": image, "prompt": item.prompt, "mask": mask, **fields})
    submitted = iter(client.submit_many(items, home_region=runtime.home))
    answers = []
    for result in results:
        outcome = result if result is not None else next(submitted)
        if isinstance(outcome, BatchResult):
            answers.append(outcome)
        elif isinstance(outcome, JobHandle):
            record = outcome.record or client.get(outcome.id)
            view = _view(runtime, record)
            answers.append(BatchResult(status=202 if outcome.created else 200, job=view))
        else:
            answers.append(_failed(outcome))
    return BatchResponse(results=answers)


def _failed(error: Exception) -> BatchResult:
    api = as_api_error(error)
    return BatchResult(
        status=api.status, error=ErrorBody(code=api.code, message=api.message, field=api.field)
    )


@router.put("/jobs/{job_id}", status_code=202, response_model=JobView, responses=SUBMITTED)
def put_job(
    job_id: str,
    body: JobRequest,
    request: Request,
    response: Response,
    caller: CallerDep,
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyHeader = None,
) -> JobView:
    """Enqueue a job under a client-chosen id (1-64 of ``A-Za-z0-9_-``), your tenant's own (another
    tenant's job of the same id is another job); idempotent: the same id with the same body
    returns that job, with another body 409."""
    if not CLIENT_JOB_ID.match(job_id):
        raise InvalidInput("id", f"must be 1-64 letters, digits, '_' or '-' (got {job_id[:80]!r})")
    stored = scoping.stored_id(caller, job_id)
    try:
        return _submit(request, caller, body, response, prefer, idempotency_key, job_id=stored)
    except IdempotencyConflict as conflict:
        if conflict.key != stored:
            raise
        message = f"job {job_id} exists with a different request body; choose another id"
        raise ApiError(409, "idempotency_conflict", message, "id") from None


@router.get("/jobs/{job_id}", response_model=JobView, responses=GONE)
def get_job(
    job_id: str,
    request: Request,
    response: Response,
    caller: CallerDep,
    prefer: PreferHeader = None,
) -> JobView:
    """The job: status, queue position and estimated start while queued, progress while
    running, metrics, output with a freshly signed URL, error."""
    runtime = _runtime(request)
    owned = scoping.owned(request, caller, job_id)
    record = _waited(runtime, owned, _prefer_wait(prefer, runtime), response)
    return _view(runtime, record)


@router.post("/jobs/{job_id}/cancel", response_model=JobView, responses=GONE)
def cancel_job(job_id: str, request: Request, caller: CallerDep) -> JobView:
    """A queued job never starts; a running one stops at its next denoising step. A job that
    already ended is returned unchanged."""
    runtime = _runtime(request)
    record = scoping.owned(request, caller, job_id)
    return _view(runtime, runtime.client.cancel(record.id))


@router.post(
    "/jobs/{job_id}/webhook/replay", status_code=202, response_model=Replayed, responses=GONE
)
def replay_webhook(job_id: str, request: Request, caller: CallerDep) -> Replayed:
    """Send the job's most recent webhook event again (same ``webhook-id``)."""
    record = scoping.owned(request, caller, job_id)
    delivery = _runtime(request).client.replay_webhook(record.id)
    if delivery is None:
        raise ApiError(409, "no_webhook_event", f"job {job_id} has sent no webhook event")
    return Replayed(webhook_id=delivery.id, type=delivery.type)


@router.get("/regions", response_model=Regions)
def regions(request: Request, caller: CallerDep) -> Regions:
    """Per region: live workers, busy workers, queued jobs."""
    runtime = _runtime(request)
    statuses = runtime.client.regions()
    return Regions(regions=[_region_view(name, status) for name, status in statuses.items()])
