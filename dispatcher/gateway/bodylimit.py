"""413 for a request body past the cap, answered before the body is read past it.

A declared ``Content-Length`` over the cap is answered at once, without reading a byte (the
server enforces a declared length, so a body cannot exceed it). A body without one (chunked) is
taken in up to the cap, where the app would have read it all anyway, and refused as soon as it
passes the cap; within it, the app reads the same messages.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large_body(cap: int) -> bytes:
    error = {"code": "body_too_large", "message": f"the request body is larger than {cap} bytes"}
    return json.dumps({"error": {**error, "field": "body"}}).encode()


class BodyLimit:
    """Pure ASGI middleware: streaming responses pass through untouched."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await _refuse(send, self.max_bytes)
                return
            await self.app(scope, receive, send)
            return
        taken: list[Message] = []
        size = 0
        while True:
            message = await receive()
            taken.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _refuse(send, self.max_bytes)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return taken.pop(0) if taken else await receive()

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, cap: int) -> None:
    body = too_large_body(cap)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
