"""The playground page at ``/``: submit an image, watch it animate, copy the ``curl``.

One static HTML file with a little JavaScript, no build step. The page itself carries no key:
the visitor pastes one, kept in the browser's local storage, and every API call sends it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from animfleet_api.bounds import MAX_PROMPT_CHARS

PAGE = Path(__file__).with_name("static") / "playground.html"
ICON = PAGE.with_name("favicon.svg")

router = APIRouter()


@cache
def _page() -> str:
    # The prompt box takes what the API does: the bound comes from the request model.
    page = PAGE.read_text(encoding="utf-8")
    return page.replace("__MAX_PROMPT_CHARS__", str(MAX_PROMPT_CHARS))


@router.get("/", include_in_schema=False, response_class=HTMLResponse)
def playground() -> HTMLResponse:
    return HTMLResponse(
        _page(),
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; "
            "media-src *; connect-src 'self'; style-src 'self' 'unsafe-inline'; "
            "script-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get("/favicon.svg", include_in_schema=False)
@router.get("/favicon.ico", include_in_schema=False)  # what a browser asks for unprompted
def favicon() -> Response:
    return Response(
        ICON.read_bytes(),
        media_type="image/svg+xml",
        headers={"Cache-Control": "max-age=86400", "X-Content-Type-Options": "nosniff"},
    )
