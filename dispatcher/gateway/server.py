"""How the gateway is served: uvicorn on h11, with a bound on the time a request's head takes.

uvicorn closes an idle keep-alive connection, but a connection that sends nothing, or trickles
its request line and headers a byte at a time, holds its socket for good. Here each request's
head (from the connection's start, or from the first byte of a later request on it) must be
complete within ``ANIMFLEET_GATEWAY_HEADER_TIMEOUT_S``; past that the client gets 408 and the
connection closes. The body's own limits are :class:`dispatcher.gateway.bodylimit.BodyLimit`'s.
At most ``ANIMFLEET_GATEWAY_MAX_CONNECTIONS`` connections (and requests in progress) are served
at once; a request past that is answered 503 at once (uvicorn's ``limit_concurrency``).
"""

from __future__ import annotations

import asyncio
import json

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from dispatcher.gateway.settings import GatewaySettings


def timed_out_head(timeout_s: float) -> bytes:
    """The raw 408 a connection gets when its request head is late (no request to answer yet,
    so written as bytes, in the gateway's error format)."""
    message = f"the request line and headers did not arrive within {timeout_s:g} s"
    body = json.dumps(
        {"error": {"code": "request_timeout", "message": message, "field": "headers"}}
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is late."""

    head_timeout_s = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of a later request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in (or the connection ended)
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        self.transport.write(timed_out_head(self.head_timeout_s))
        self.transport.close()


def protocol(head_timeout_s: float) -> type[HeadTimeoutProtocol]:
    """The protocol class uvicorn builds per connection, with this head timeout."""
    return type("GatewayProtocol", (HeadTimeoutProtocol,), {"head_timeout_s": head_timeout_s})


def server_config(app: ASGIApp, settings: GatewaySettings, host: str, port: int) -> uvicorn.Config:
    """The uvicorn configuration the gateway runs with (``animfleet web`` and the tests)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol(settings.header_timeout_s),
        limit_concurrency=settings.max_connections,
        log_config=None,
        access_log=False,
    )
