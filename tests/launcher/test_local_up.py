"""``animfleet local up`` as a developer runs it: auth on, the printed key and fleet file work
as printed, fixed ports, the CLI's data alone on stdout (submit, list, download), Ctrl-C done
within 5 s and said so; and when the process that started the fleet is SIGKILLed, every
process of the fleet is gone soon after (none is left an orphan)."""

from __future__ import annotations

import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import av
import httpx
import pytest

from animfleet.jobs import JobState
from animfleet.topology import Topology
from animfleet_sdk import Animfleet, ApiError
from dispatcher import Client
from launcher.local_servers import free_port
from tools import EXAMPLE_IMAGE
from tools.families.tiny import build_tiny

ROOT = Path(__file__).resolve().parents[2]
STANDIN = {"ANIMFLEET_WORKER_ANIMATOR": "tests.fixtures.standin:StandinAnimator"}


@dataclass
class Started:
    process: subprocess.Popen[str]
    lines: dict[str, str]  # what local up printed, by the text before ": "
    stderr: queue.Queue[str]


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))


@pytest.fixture
def local_up(tmp_path: Path) -> Iterator[Callable[..., Started]]:
    started: list[subprocess.Popen[str]] = []
    readers: list[threading.Thread] = []

    def start(*options: str, standin: bool = True) -> Started:
        if "--port" not in options:  # never 8000: other fleets may run beside this one
            options = (*options, "--port", str(free_port()))
        argv = [sys.executable, "-m", "launcher", "local", "up", "--root", str(tmp_path / "run")]
        process = subprocess.Popen(
            [*argv, "--storage", "local", "--region", "one", "--model", "standin:0.2", *options],
            cwd=ROOT,
            env={**os.environ, **(STANDIN if standin else {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # what a terminal's Ctrl-C reaches is the test's to send
        )
        started.append(process)
        out: queue.Queue[str] = queue.Queue()
        err: queue.Queue[str] = queue.Queue()
        for stream, into in ((process.stdout, out), (process.stderr, err)):
            reader = threading.Thread(target=_lines, args=(stream, into), daemon=True)
            reader.start()
            readers.append(reader)
        printed: dict[str, str] = {}
        deadline = time.monotonic() + 180
        while "export ANIMFLEET_FLEET_FILE" not in printed:
            try:
                line = out.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("local up printed no fleet file within 180 s")
            name, _, value = line.strip().partition(
                "=" if line.strip().startswith("export") else ": "
            )
            printed[name] = value
        return Started(process, printed, err)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
    for reader in readers:
        reader.join(10)  # the pipes end once the process and its children are gone
    for process in started:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _wait_all_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait (on pidfds: woken by each exit) until every pid has exited; returns those left."""
    poller = select.poll()
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        fds[fd] = pid
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while fds and time.monotonic() < deadline:
        for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            poller.unregister(fd)
            os.close(fd)
            fds.pop(fd)
    left = set(fds.values())
    for fd in fds:
        os.close(fd)
    return left


def _animfleet(fleet_file: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "--fleet", fleet_file, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_local_up_behaves_like_production_and_ctrl_c_stops_it_within_5_s(
    local_up: Callable[..., Started],
    tmp_path: Path,
) -> None:
    port, redis_port = free_port(), free_port()
    fleet = local_up("--port", str(port), "--redis-port", str(redis_port))
    printed = fleet.lines
    assert printed["one"].startswith(f"http://127.0.0.1:{port} ")
    assert printed["redis"] == f"127.0.0.1:{redis_port}"
    key = printed["API key (tenant default)"]
    assert re.fullmatch(r"af_[0-9a-f]{16}_\S+", key), key
    assert printed["webhook secret"].startswith("whsec_")
    assert any("loopback" in name and "allowed" in name for name in printed), printed
    url, fleet_file = f"http://127.0.0.1:{port}", printed["export ANIMFLEET_FLEET_FILE"].split()[0]

    assert httpx.get(f"{url}/v1/jobs").status_code == 401  # auth is on
    assert httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {key}"}).is_success
    listed = _animfleet(fleet_file, "keys", "list", "--tenant", "default")
    assert key.split("_")[1] in listed.stdout, listed.stderr

    # JOB=$(animfleet submit ...) holds the id alone; logs go to stderr.
    submitted = _animfleet(fleet_file, "submit", str(EXAMPLE_IMAGE), "pan left", "--size", "64")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    assert re.fullmatch(r"one\.[0-9a-f]+", job), submitted.stdout
    waited = _animfleet(fleet_file, "submit", str(EXAMPLE_IMAGE), "zoom", "--size", "64")
    client = Client(Topology.load(fleet_file))
    try:
        assert client.wait(job, 120).status is JobState.SUCCEEDED
    finally:
        client.close()
    jobs = _animfleet(fleet_file, "list").stdout.splitlines()
    assert [line.split("\t")[0] for line in jobs] == [waited.stdout.strip(), job]  # newest first
    assert _animfleet(fleet_file, "list", "--status", "succeeded", "--limit", "1").stdout
    out = tmp_path / "video.mp4"
    downloaded = _animfleet(fleet_file, "download", job, "-o", str(out))
    assert downloaded.stdout == f"{out}\n", downloaded.stderr
    assert out.read_bytes()[4:8] == b"ftyp"  # an MP4
    # The printed key sees the job the CLI submitted (tenant default).
    assert httpx.get(f"{url}/v1/jobs/{job}", headers={"Authorization": f"Bearer {key}"}).is_success

    children = _descendants(fleet.process.pid)
    began = time.monotonic()
    os.kill(fleet.process.pid, signal.SIGINT)
    fleet.process.wait(timeout=30)
    took = time.monotonic() - began
    said = []
    while not fleet.stderr.empty():
        said.append(fleet.stderr.get())
    assert took < 5.0, f"Ctrl-C took {took:.1f} s"
    assert "stopping the local fleet ..." in said and any("stopped in" in s for s in said), said
    assert not _wait_all_gone(children, 5.0)
    print(f"Ctrl-C: the local fleet stopped and exited in {took:.2f} s")


def test_a_local_fleet_dies_with_the_process_that_started_it(
    local_up: Callable[..., Started],
) -> None:
    fleet = local_up()
    children = _descendants(fleet.process.pid)
    assert len(children) >= 7, children  # redis, watchdog, worker (+ pool), web, webhooks, ...
    os.kill(fleet.process.pid, signal.SIGKILL)  # no handler, no atexit, no finally
    fleet.process.wait()
    left = _wait_all_gone(children, 15.0)
    assert not left, {pid: Path(f"/proc/{pid}/cmdline").read_text() for pid in left}


def test_a_port_in_use_is_one_line_naming_the_option(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = [sys.executable, "-m", "launcher", "local", "up", "--root", str(tmp_path)]
        for option in ("--port", "--redis-port"):
            free = [] if option == "--port" else ["--port", str(free_port())]
            result = subprocess.run(
                [*up, *free, option, str(port)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 2
            (line,) = result.stderr.strip().splitlines()
            assert line == (
                f"animfleet: error: {option} {port}: 127.0.0.1:{port} is in use; give another"
            )


def test_local_up_serves_a_family_checkpoint_to_the_sdk_unchanged(
    local_up: Callable[..., Started], tmp_path: Path
) -> None:
    """``--model`` a tiny LTX-Video directory: the SDK submits as to any fleet, the gateway
    fits the job to the family's rules (frames 8k+1 here 4k+1: the tiny VAE) and says so."""
    model = build_tiny("ltx", tmp_path / "tiny-ltx")
    port = free_port()
    fleet = local_up("--model", str(model), "--port", str(port), standin=False)
    url, key = f"http://127.0.0.1:{port}", fleet.lines["API key (tenant default)"]
    with Animfleet(url, api_key=key) as api:
        job = api.submit(EXAMPLE_IMAGE, "pan left", frames=8, size=32, steps=2)
        done = api.wait(job.id, 180)
        assert done.status == "succeeded", done
        assert done.model_version == "tiny-ltx@local"
        assert done.input["frames"] == 9 and done.input["family"] == "LTXImageToVideoPipeline"
        assert [(a["field"], a["asked"], a["delivered"]) for a in done.input["adjustments"]] == [
            ("frames", 8, 9)
        ]
        fleet_file = fleet.lines["export ANIMFLEET_FLEET_FILE"].split()[0]
        out = tmp_path / "video.mp4"
        downloaded = _animfleet(fleet_file, "download", done.id, "-o", str(out))
        assert downloaded.returncode == 0, downloaded.stderr
        with av.open(str(out)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert len(frames) == 9 and frames[0].shape == (32, 32, 3)
        with pytest.raises(ApiError) as refused:
            api.submit(EXAMPLE_IMAGE, "pan left", loop=True, size=32)
        assert "loop" in str(refused.value) and "tiny-ltx@local" in str(refused.value)
