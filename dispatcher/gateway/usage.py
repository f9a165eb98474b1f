"""``GET /v1/usage``: what the calling tenant used, by day (UTC), summed over the regions."""

from __future__ import annotations

import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from animfleet.region.usage import DayUsage, UsageBook, day_of, fleet_days
from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.errors import ApiError
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.views import error_responses, runtime_of

# A day, strictly YYYY-MM-DD (``date.fromisoformat`` alone would also take 20260101).
DAY: dict[str, Any] = {
    "pattern": r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$",
    "description": "YYYY-MM-DD (UTC), inclusive",
    "json_schema_extra": {"format": "date"},
}
MAX_DAYS = 366
DEFAULT_DAYS = 30

router = APIRouter(prefix="/v1")


class Usage(BaseModel):
    tenant: str
    from_day: str = Field(alias="from")
    to_day: str = Field(alias="to")
    days: list[DayUsage] = Field(description="days with any use, oldest first")
    total: DayUsage = Field(description="the days added up (its `day` is `to`)")


def book(runtime: Runtime, region: str) -> UsageBook:
    """``region``'s usage roll-ups."""
    client = runtime.client
    prefix = client.topology.region(region).storage.prefix
    return UsageBook(client.store(region), region, runtime.objects(region), prefix)


def _parse(value: str, field: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:  # the pattern passed it: a day the month lacks, or year 0
        message = f"{field}: not a date (got {value!r})"
        raise ApiError(422, "invalid_input", message, field) from None


@router.get(
    "/usage",
    response_model=Usage,
    response_model_by_alias=True,
    responses=error_responses(401, 422, 429),
    operation_id="getUsage",
)
def get_usage(
    request: Request,
    caller: CallerDep,
    from_day: Annotated[str | None, Query(alias="from", **DAY)] = None,
    to_day: Annotated[str | None, Query(alias="to", **DAY)] = None,
) -> Usage:
    """Your jobs by outcome, GPU-seconds, frames x pixels, output bytes and deletions, per
    day, from ``from`` to ``to`` (default: the last 30 days; at most 366 days). Jobs count on
    the day they ended, about a second after."""
    today = datetime.date.fromisoformat(day_of(datetime.datetime.now(datetime.UTC).timestamp()))
    last = _parse(to_day, "to") if to_day else today
    first = _parse(from_day, "from") if from_day else last - datetime.timedelta(DEFAULT_DAYS - 1)
    if first > last or (last - first).days >= MAX_DAYS:
        message = f"from: must be on or before to, at most {MAX_DAYS} days apart"
        raise ApiError(422, "invalid_input", f"{message} (got {first} .. {last})", "from")
    runtime = runtime_of(request)
    books = [book(runtime, name) for name in runtime.client.topology.names]
    days = fleet_days(books, caller.tenant, str(first), str(last))
    total = DayUsage(day=str(last))
    for day in days:
        total.add(day)
    return Usage.model_validate(
        {"tenant": caller.tenant, "from": str(first), "to": str(last), "days": days, "total": total}
    )
