"""413 for a request body past the cap, answered before the body is read past it; 408 for a
body that stops arriving.

A declared ``Content-Length`` over the cap is answered at once, without reading a byte (the
server enforces a declared length, so a body cannot exceed it). A body without one (chunked) is
taken in up to the cap, where the app would have read it all anyway, and refused as soon as it
passes the cap; within it, the app reads the same messages.

Until its last part arrives, each read of the body waits at most ``timeout_s``, and the whole
body must be in within ``deadline_s`` of the request's start (a client that declares a length
and stops sending, or trickles a byte now and then, would otherwise hold the connection and a
handler for good): then the client gets 408 and the connection closes, and the app reads a
disconnect (its own answer to that goes nowhere). Once the body is in, reads pass through
untouched (a stream's wait for the client to go away has no limit).
"""

from __future__ import annotations

import json

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DISCONNECT: Message = {"type": "http.disconnect"}


def too_large_body(cap: int) -> bytes:
    error = {"code": "body_too_large", "message": f"the request body is larger than {cap} bytes"}
    return json.dumps({"error": {**error, "field": "body"}}).encode()


def timed_out_body(timeout_s: float, whole: bool = False) -> bytes:
    message = (
        f"the request body was not complete within {timeout_s:g} s; the connection is closed"
        if whole
        else f"no part of the request body arrived for {timeout_s:g} s; the connection is closed"
    )
    return json.dumps(
        {"error": {"code": "request_timeout", "message": message, "field": "body"}}
    ).encode()


class BodyLimit:
    """Pure ASGI middleware: streaming responses pass through untouched."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, timeout_s: float = 10.0, deadline_s: float = 120.0
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s

    async def __call__(self, scope: Scope, outer_receive: Receive, outer_send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, outer_receive, outer_send)
            return
        body = _TimedBody(outer_receive, outer_send, self.timeout_s, self.deadline_s)
        receive, send = body.receive, body.send
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await _refuse(send, 413, too_large_body(self.max_bytes))
                return
            await self.app(scope, receive, send)
            return
        taken: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if body.timed_out:  # answered 408 already
                return
            taken.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _refuse(send, 413, too_large_body(self.max_bytes))
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


class _TimedBody:
    """The request's receive with a limit on each wait for the body and on the whole body's
    arrival, and a send that drops what the app answers once the 408 went out."""

    def __init__(self, receive: Receive, send: Send, timeout_s: float, deadline_s: float) -> None:
        self._receive, self._send, self.timeout_s = receive, send, timeout_s
        self.deadline_s = deadline_s
        self._deadline = anyio.current_time() + deadline_s
        self.complete = False  # the body's last part arrived: no limit from here on
        self.timed_out = False
        self.started = False  # a response began: too late for a 408

    async def receive(self) -> Message:
        if self.timed_out:
            return DISCONNECT
        if self.complete:
            return await self._receive()
        message: Message | None = None
        left = self._deadline - anyio.current_time()
        with anyio.move_on_after(min(self.timeout_s, max(left, 0.0))):
            message = await self._receive()
        if message is None:
            self.timed_out = True
            if not self.started:
                whole = left <= self.timeout_s  # the body's deadline came before the read's
                limit = self.deadline_s if whole else self.timeout_s
                await _refuse(self._send, 408, timed_out_body(limit, whole))
            return DISCONNECT
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True
        return message

    async def send(self, message: Message) -> None:
        if self.timed_out:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


async def _refuse(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
