"""Slow image origins cannot take the gateway's threads: only a few requests fetch a URL at
once (fewer per tenant); the rest are refused at once with 429 and Retry-After, while requests
that need no fetch go on being served."""

from __future__ import annotations

import base64
import http.server
import io
import threading
import time
from collections.abc import Iterator

import pytest
from PIL import Image

from animfleet.netguard import NetGuard
from dispatcher.gateway.errors import ApiError
from dispatcher.gateway.images import FetchSlots, resolve_image
from storage.local import LocalStore

GUARD = NetGuard(allow_loopback=True)


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


PNG = _png()


@pytest.fixture
def slow_origin() -> Iterator[tuple[str, threading.Event]]:
    """An origin that answers only once the test releases it."""
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            release.wait(30)
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/cat.png", release
    release.set()
    server.shutdown()
    server.server_close()


def test_a_slow_origin_holds_only_its_slots(
    slow_origin: tuple[str, threading.Event], tmp_path: object
) -> None:
    url, release = slow_origin
    objects = LocalStore(tmp_path / "objects")  # type: ignore[operator]
    slots = FetchSlots(total=3, per_tenant=2)
    results: list[bytes] = []

    def fetch(tenant: str) -> threading.Thread:
        thread = threading.Thread(
            target=lambda: results.append(resolve_image(url, GUARD, objects, slots, tenant))
        )
        thread.start()
        return thread

    held = [fetch("a"), fetch("a"), fetch("b")]
    deadline = time.monotonic() + 10
    while slots._busy < 3:  # each fetch holds its slot once the origin has it waiting
        assert time.monotonic() < deadline, "fetches did not start"
        time.sleep(0.01)

    for tenant in ("a", "b", "c"):  # a is at its own cap; b and c find every slot taken
        started = time.monotonic()
        with pytest.raises(ApiError) as refused:
            resolve_image(url, GUARD, objects, slots, tenant)
        assert refused.value.status == 429 and refused.value.retry_after_s == 1
        assert time.monotonic() - started < 1.0  # refused at once, not after the origin
    # A request that needs no fetch is served meanwhile.
    inline = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert resolve_image(inline, GUARD, objects, slots, "a") == PNG

    release.set()
    for thread in held:
        thread.join(10)
    assert results == [PNG, PNG, PNG]
    assert resolve_image(url, GUARD, objects, slots, "c") == PNG  # the slots came back
