"""``DELETE /v1/jobs/{id}``: erase a job, its inputs and its outputs.

A job not yet ended is canceled first. A run still live then (it stops at its next denoising
step, a few seconds at most) is answered at once with 409 ``still_running`` and
``Retry-After``: no thread waits for it, and the retry, once the run has stopped, erases. Then
go: every output object of the job (one per run:
``outputs/<job>/<run>.mp4``, and ``outputs/<job>.mp4``), the uploads its request named, its
archived record, its record, input bytes, kept webhook events and log lines in Redis, and its
listing entry. What stays: the idempotency entry that named it and a tombstone (tenant and
time of deletion) for as long as that entry may be used, so reading the job or retrying its
submit answers 410 ``deleted`` instead of creating the job again.
"""

from __future__ import annotations

import time

import structlog
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from animfleet.jobs import JobRecord
from animfleet.region.erasure import erase_here
from animfleet.region.runs import RunLeases
from dispatcher.gateway import scoping, usage
from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.errors import ApiError
from dispatcher.gateway.joblog import delete_lines
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.views import error_responses, runtime_of
from dispatcher.tenancy import Tenancy

log = structlog.stdlib.get_logger("animfleet.gateway")

RUN_STOP_RETRY_S = 2  # a canceled run stops at its next denoising step

router = APIRouter(prefix="/v1")


class DeletedJob(BaseModel):
    id: str
    status: str = Field(description="the job's state when it was deleted (after any cancel)")
    deleted_at: float
    objects_deleted: int = Field(description="output, upload and archived-record objects")


def erase(runtime: Runtime, tenancy: Tenancy, record: JobRecord) -> tuple[JobRecord, int]:
    """Erase ``record``'s job everywhere (see the module); the record as it ended, and how
    many objects were deleted."""
    client = runtime.client
    if not record.status.terminal:
        record = client.cancel(record.id)
    if RunLeases(client.store(record.region)).held(record.id):
        message = f"job {record.id} is canceled but its run has not stopped yet; retry shortly"
        raise ApiError(409, "still_running", message, retry_after_s=RUN_STOP_RETRY_S)
    # Counted before its record goes: a job no roll-up has seen yet is counted with it.
    usage.book(runtime, record.region).note_deleted(record)
    deleted, now = 0, time.time()
    for region in sorted({record.region, record.home_region}):
        prefix = client.topology.region(region).storage.prefix
        objects = runtime.objects(region)
        deleted += erase_here(client.store(region), region, objects, prefix, record, now)
    tenancy.tenants.settle(record.tenant, [record.id])
    delete_lines(client, record.id)  # lines a spilled job left in other regions
    # No job_id field: the line would start the deleted job's log again.
    log.info("job.deleted", deleted_job=record.id, tenant=record.tenant, objects=deleted)
    return record, deleted


@router.delete(
    "/jobs/{job_id}",
    response_model=DeletedJob,
    responses=error_responses(401, 404, 409, 410, 429),
    operation_id="deleteJob",
)
def delete_job(job_id: str, request: Request, caller: CallerDep) -> DeletedJob:
    """Erase the job (GDPR erasure): canceled first if it has not ended, then its outputs,
    the uploads its request named, its record and its log. Afterwards the job answers 410
    ``deleted``, and so does a retried submit with its idempotency key. A job whose run has
    not stopped yet answers 409 ``still_running`` with ``Retry-After`` at once (it is
    canceled: retry)."""
    runtime = runtime_of(request)
    record = scoping.owned(request, caller, job_id)
    ended, deleted = erase(runtime, scoping.tenancy_of(request), record)
    return DeletedJob(
        id=job_id, status=ended.status.value, deleted_at=time.time(), objects_deleted=deleted
    )
