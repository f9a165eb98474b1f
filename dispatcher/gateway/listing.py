"""``GET /v1/jobs``: the caller's jobs, newest first, a page at a time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from animfleet.jobs import JobState
from animfleet.jobview import JobView
from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.errors import ApiError
from dispatcher.gateway.schemas import ErrorResponse
from dispatcher.gateway.views import render, runtime_of
from dispatcher.tenancy import MAX_PAGE, InvalidCursor, MalformedCursor, Tenancy

router = APIRouter(prefix="/v1")


class JobList(BaseModel):
    jobs: list[JobView]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page. A page may "
        "hold fewer than `limit` jobs when a filter skipped many: go on while it is set."
    )


@router.get(
    "/jobs",
    response_model=JobList,
    responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 422, 429)},
)
def list_jobs(
    request: Request,
    caller: CallerDep,
    status: Annotated[JobState | None, Query(description="only jobs in this state")] = None,
    created_after: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="unix seconds, exclusive", examples=[1.7e9]),
    ] = None,
    created_before: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="unix seconds, exclusive", examples=[1.8e9]),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=r"^[A-Za-z0-9_-]+$",
            description="from `next_cursor`; one this API did not hand out answers 404, one"
            " that cannot be a position (a created time that is not finite) 400",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
) -> JobList:
    """Your jobs, newest first. Jobs created while you page through never shift a page."""
    runtime = runtime_of(request)
    tenancy: Tenancy = request.app.state.tenancy
    try:
        page = tenancy.list_jobs(
            caller.tenant,
            status=status,
            created_after=created_after,
            created_before=created_before,
            cursor=cursor,
            limit=limit,
        )
    except MalformedCursor as error:
        raise ApiError(400, "invalid_cursor", f"cursor: {error}", "cursor") from None
    except InvalidCursor as error:
        # The page it names does not exist (the cursor is opaque: its form cannot say more).
        raise ApiError(404, "not_found", f"cursor: {error}", "cursor") from None
    return JobList(jobs=[render(runtime, r) for r in page.jobs], next_cursor=page.next_cursor)
