"""The gateway's limits against clients that would hold it: a body trickled a byte at a time,
more connections than it serves, twenty large zero-pixel PNGs uploaded at once while health
checks are timed, and ``DELETE`` of a job whose run is still going.

Real gateways: in-process uvicorn as ``animfleet web`` serves it, and for the load test an
``animfleet web`` process (its memory read from ``/proc``); a real Redis, local storage.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
import redis

from animfleet.jobs import JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.region.runs import RunLeases
from animfleet.topology import Topology
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.gateway import GatewaySettings
from launcher.local_fleet import LocalFleet
from launcher.local_servers import free_port

DB = 14
REGION = "el"
BODY_DEADLINE_S = 2.0
UPLOADS = 20
HEALTH_P99_S = 0.050
RSS_GROWTH_BYTES = 300 * 2**20


def zero_png(side: int = 4096) -> bytes:
    """A ``side``-square 16-bit RGBA PNG of zeros: 128 MiB of pixel rows in about 130 KB."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = bytes((1 + side * 8) * side)
    head = struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", head)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def fleet_file(servers: LocalFleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    redis.Redis(port=servers.redis_port, db=DB).flushdb()
    root = tmp_path_factory.mktemp("edge-limits")
    path = root / "fleet.toml"
    path.write_text(
        f"[regions.{REGION}]\n"
        f'broker_url = "redis://127.0.0.1:{servers.redis_port}/{DB}"\n'
        f"[regions.{REGION}.storage]\n"
        f'backend = "local"\nroot = "{root / "storage"}"\n'
    )
    return path


@pytest.fixture(scope="module")
def topology(fleet_file: Path) -> Topology:
    return Topology.load(fleet_file)


@pytest.fixture(scope="module")
def gateway(
    topology: Topology,
    serve: Callable[[Client, GatewaySettings], AbstractContextManager[str]],
) -> Iterator[str]:
    settings = GatewaySettings(
        region=REGION, auth=False, body_deadline_s=BODY_DEADLINE_S, max_connections=4
    )
    client = Client(topology, admission=AdmissionSettings(retry_budget_s=0.0, max_attempts=1))
    with serve(client, settings) as url:
        yield url


def _connect(url: str) -> socket.socket:
    host, _, port = url.removeprefix("http://").partition(":")
    return socket.create_connection((host, int(port)), timeout=30)


def test_a_trickled_body_is_cut_off_with_408_at_the_body_deadline(gateway: str) -> None:
    started = time.monotonic()
    with _connect(gateway) as sock:
        sock.sendall(
            b"POST /v1/uploads/direct HTTP/1.1\r\nhost: gateway\r\ncontent-type: image/png\r\n"
            b"content-length: 1000\r\n\r\n"
        )
        answer = b""
        while b"\r\n\r\n" not in answer:  # a byte a second: each read well within its limit
            assert time.monotonic() - started < 15, "a trickled body was never cut off"
            try:
                sock.sendall(b"x")
                sock.settimeout(1.0)
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionError:
                break
        sock.settimeout(5)
        while chunk := sock.recv(65536):
            answer += chunk
    took = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["field"] == "body"
    assert f"within {BODY_DEADLINE_S:g} s" in error["message"], error
    assert BODY_DEADLINE_S <= took < BODY_DEADLINE_S + 5, took


def test_connections_past_the_cap_are_answered_503_until_some_close(gateway: str) -> None:
    idle = [_connect(gateway) for _ in range(4)]  # the cap: connections held, never a byte
    try:
        # uvicorn counts a connection once it is made: wait for the last one to count.
        deadline = time.monotonic() + 10
        while (answer := httpx.get(f"{gateway}/healthz")).status_code != 503:
            assert time.monotonic() < deadline, "the fifth connection was served"
            time.sleep(0.05)
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10
    while (answer := httpx.get(f"{gateway}/healthz")).status_code != 200:
        assert time.monotonic() < deadline, f"still refused after the others closed: {answer}"
        time.sleep(0.05)


def test_delete_of_a_running_job_answers_409_at_once_then_erases_once_it_stopped(
    gateway: str, servers: LocalFleet
) -> None:
    store = JobStore(redis.Redis(port=servers.redis_port, db=DB))
    params = JobParams(prompt="pan", frames=8, fps=8, width=64, height=64, seed=1)
    record = JobRecord(
        id=new_job_id(REGION), region=REGION, home_region=REGION, params=params, tenant="default"
    )
    seed(store.redis, record, b"image", index=True)
    RunLeases(store).start(record.id, "worker-a@host", ttl_s=120)  # its run goes on
    url = f"{gateway}/v1/jobs/{record.id}"
    started = time.monotonic()
    answer = httpx.delete(url, timeout=30)
    assert time.monotonic() - started < 1.0, "DELETE waited for the run"
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "still_running"
    assert int(answer.headers["Retry-After"]) >= 1
    assert store.get(record.id).status is JobState.CANCELED  # canceled: the run stops
    store.redis.delete(RunLeases.key(record.id))  # ... and it stopped
    assert httpx.delete(url, timeout=30).status_code == 200
    assert httpx.get(url).json()["error"]["code"] == "deleted"


# -- large images at once ----------------------------------------------------------------------


def _memory(pid: int) -> dict[str, int]:
    """The process's resident set now (VmRSS) and at its peak (VmHWM), in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


@pytest.fixture
def web_process(fleet_file: Path, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """``animfleet web`` for the region, as the Procfile runs it: (its URL, its pid)."""
    port = free_port()
    env = {
        **os.environ,
        "ANIMFLEET_FLEET_FILE": str(fleet_file),
        "ANIMFLEET_GATEWAY_AUTH": "0",
    }
    argv = [sys.executable, "-m", "launcher", "web", "--region", REGION]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    with (tmp_path / "web.log").open("wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "web.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "animfleet web did not start"
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(15)


def _health_latencies(url: str, going: Callable[[list[float]], bool]) -> list[float]:
    """Seconds each ``GET /healthz`` took, one every 10 ms while ``going(latencies)``."""
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as http:
        while going(latencies):
            started = time.perf_counter()
            assert http.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.01)
    return latencies


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def test_twenty_zero_pngs_at_once_leave_health_checks_fast_and_memory_bounded(
    web_process: tuple[str, int], make_image: Callable[..., bytes]
) -> None:
    url, pid = web_process
    headers = {"content-type": "image/png"}
    with httpx.Client(base_url=url, timeout=120) as http:  # warm: every code path loaded
        assert http.post("/v1/uploads/direct", content=make_image(64, 64), headers=headers)
    idle = _health_latencies(url, lambda done: len(done) < 200)
    baseline = _memory(pid)["VmRSS"]
    png = zero_png()
    answers: list[int] = []
    uploading = threading.Event()
    uploading.set()

    def upload() -> None:
        with httpx.Client(base_url=url, timeout=300) as http:
            answer = http.post("/v1/uploads/direct", content=png, headers=headers)
            answers.append(answer.status_code)

    loaded: list[float] = []
    checker = threading.Thread(
        target=lambda: loaded.extend(_health_latencies(url, lambda _: uploading.is_set()))
    )
    checker.start()
    senders = [threading.Thread(target=upload) for _ in range(UPLOADS)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(300)
    uploading.clear()
    checker.join(30)
    assert answers == [201] * UPLOADS
    growth = _memory(pid)["VmHWM"] - baseline
    # The bar is 50 ms; on a machine whose idle p99 is already a good part of that (other work
    # on its cores), 4x the idle p99 measured just before. A check on the event loop (or one
    # holding the interpreter lock) stalls health checks for the whole check: seconds.
    bar = max(HEALTH_P99_S, 4 * _p99(idle))
    print(
        f"\n{UPLOADS} zero PNGs ({len(png)} B, 4096x4096 16-bit RGBA): /healthz p99 idle "
        f"{_p99(idle) * 1000:.1f} ms, during {_p99(loaded) * 1000:.1f} ms over {len(loaded)} "
        f"checks (bar {bar * 1000:.0f} ms); RSS peak growth {growth / 2**20:.0f} MiB "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    assert len(loaded) >= 20, "too few health checks to judge"
    assert _p99(loaded) < bar, f"/healthz p99 {_p99(loaded) * 1000:.1f} ms"
    assert growth < RSS_GROWTH_BYTES, f"RSS grew {growth / 2**20:.0f} MiB"
