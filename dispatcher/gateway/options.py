"""``OPTIONS``: every method a path allows (Starlette would name only the first route's).

A browser's CORS preflight never reaches these: the CORS middleware answers it when
``ANIMFLEET_GATEWAY_CORS_ORIGINS`` is set.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Response

router = APIRouter(prefix="/v1", include_in_schema=False)

ALLOWED = {
    "/jobs": "GET, POST, OPTIONS",
    "/jobs/batch": "POST, OPTIONS",
    "/jobs/{job_id}": "GET, PUT, DELETE, OPTIONS",
    "/jobs/{job_id}/logs": "GET, OPTIONS",
    "/jobs/{job_id}/cancel": "POST, OPTIONS",
    "/jobs/{job_id}/events": "GET, OPTIONS",
    "/jobs/{job_id}/webhook/replay": "POST, OPTIONS",
    "/regions": "GET, OPTIONS",
    "/uploads": "POST, OPTIONS",
    "/uploads/direct": "POST, OPTIONS",
    "/usage": "GET, OPTIONS",
}


def _handler(allow: str) -> Callable[[], Response]:
    def answer() -> Response:  # no parameters: nothing of the request is read
        return Response(status_code=204, headers={"Allow": allow})

    return answer


for _path, _allow in ALLOWED.items():
    router.add_api_route(_path, _handler(_allow), methods=["OPTIONS"], status_code=204)
