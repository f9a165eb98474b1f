"""``animfleet local up`` stopped and started again: the same ports serve again at once (the
port check ignores connections left in TIME_WAIT), SeaweedFS listens on no port but the ones the
summary names, inside the fleet's range, a stop under load (jobs running, every core busy) ends
within its bound, and SIGINT stops a fleet started from a script in the background (where the
shell ignores it)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx
import psutil
import pytest

from launcher.local_servers import free_port, port_free, port_range
from tests.launcher.test_local_up import Started, local_up  # noqa: F401  (the fixture)
from tools import EXAMPLE_IMAGE

pytestmark = pytest.mark.e2e
# What `local up` promises for Ctrl-C whatever the load: SIGTERM, 2 s, SIGKILL, at most 2 s
# more per phase (clients, then servers), the watchdog's hand-over.
STOP_BOUND_S = 10.0


def _stop(started: Started) -> float:
    """SIGINT, as Ctrl-C sends it; the seconds until the process exited."""
    began = time.monotonic()
    os.kill(started.process.pid, signal.SIGINT)
    try:
        started.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("local up did not exit within 30 s of SIGINT")
    return time.monotonic() - began


def _seaweedfs_listening(started: Started) -> set[int]:
    (weed,) = [p for p in psutil.Process(started.process.pid).children(True) if p.name() == "weed"]
    return {c.laddr.port for c in weed.net_connections("tcp") if c.status == psutil.CONN_LISTEN}


@contextlib.contextmanager
def _busy_cores() -> Iterator[None]:
    """Every core spinning, as on a loaded CI machine."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_port_in_time_wait_counts_as_free() -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the check did before: "in use" for a minute
    assert port_free(port)


def test_local_up_restarts_at_once_on_the_same_ports_and_stops_under_load(
    local_up: Callable[..., Started],  # noqa: F811
) -> None:
    api, redis, s3 = free_port(), free_port(), free_port()
    fixed = ("--storage", "s3", "--port", str(api), "--redis-port", str(redis))
    first = local_up(*fixed, "--s3-port", str(s3))
    url = f"http://127.0.0.1:{api}"
    keep_alive = httpx.Client()
    assert keep_alive.get(f"{url}/v1/jobs").status_code == 401  # a connection the stop cuts
    assert _stop(first) < STOP_BOUND_S
    keep_alive.close()

    restarted = time.monotonic()
    second = local_up(*fixed, "--s3-port", str(s3))
    print(f"local up again on the same ports: up in {time.monotonic() - restarted:.1f} s")
    named = {int(p) for p in re.findall(r"\d+", second.lines["redis"].split("SeaweedFS:")[1])}
    listening = _seaweedfs_listening(second)
    low, high = port_range()
    assert listening <= named | {s3}, f"SeaweedFS listens on {listening - named - {s3}} unnamed"
    assert all(low <= port <= high for port in listening), (listening, (low, high))

    key = second.lines["API key (tenant default)"]
    headers = {"Authorization": f"Bearer {key}"}
    image = "data:image/png;base64," + base64.b64encode(EXAMPLE_IMAGE.read_bytes()).decode()
    for _ in range(3):  # a job running and two queued when Ctrl-C comes
        body = {"image": image, "prompt": "pan left", "size": 64, "frames": 8}
        assert httpx.post(f"{url}/v1/jobs", json=body, headers=headers).status_code == 202
    with _busy_cores():
        took = _stop(second)
    print(f"Ctrl-C with jobs running and every core busy: stopped in {took:.2f} s")
    assert took < STOP_BOUND_S


def test_sigint_stops_a_fleet_started_in_the_background_by_a_script(
    local_up: Callable[..., Started],  # noqa: F811
) -> None:
    started = local_up(ignore_sigint=True)
    took = _stop(started)
    said = []
    while not started.stderr.empty():
        said.append(started.stderr.get())
    assert any("stopped in" in line for line in said), said
    print(f"SIGINT to a background local up: stopped in {took:.2f} s")
