"""Shared fixtures: real servers from Python packages (private redis-server, SeaweedFS S3)."""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
import redis
from PIL import Image

from animfleet.region.store_client import store_client
from animfleet.topology import Region, Topology
from launcher.local_cluster import LocalCluster
from launcher.local_fleet import LocalFleet

# Tests serve models nobody profiled (tiny and random ones, the shipped ones on another CPU
# kind): their workers serve the safe choice instead of measuring at boot, unless a test asks
# for it (tests/workers/model/runtime/test_boot_tune.py). Worker processes inherit this.
os.environ.setdefault("ANIMFLEET_WORKER_BOOT_TUNE_S", "0")

# Parallel test workers (pytest -n) start their fleets' servers in disjoint port ranges: a test
# that restarts a server on its port must not find it taken by another worker's fleet.
# ANIMFLEET_TEST_PORT_SLOT shifts them for a second pytest run side by side with a first.
if (worker := os.environ.get("PYTEST_XDIST_WORKER", "")).startswith("gw"):
    _slot = (int(worker[2:]) + int(os.environ.get("ANIMFLEET_TEST_PORT_SLOT", "0"))) % 8
    os.environ["ANIMFLEET_LOCAL_PORTS"] = f"{15000 + 1250 * _slot}-{16249 + 1250 * _slot}"


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """A private Redis and a SeaweedFS S3 server, no workers."""
    fleet = LocalFleet(tmp_path_factory.mktemp("servers"), storage="s3", workers_per_region=0)
    with fleet:
        yield fleet


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A private Redis Cluster: three masters, each with a replica (started on first use)."""
    with LocalCluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """A private RabbitMQ node (and a Redis), no workers; skips where none is installed."""
    from launcher.local_rabbitmq import rabbitmq_available

    if not rabbitmq_available():
        pytest.skip("rabbitmq-server is not installed")
    root = tmp_path_factory.mktemp("rabbitmq")
    with LocalFleet(root, regions=("rq",), workers_per_region=0, broker="rabbitmq") as fleet:
        yield fleet


@pytest.fixture
def store_kind() -> str:
    """Which store ``redis_client`` is: one Redis here; the store-level suites override this
    with both kinds (``single`` and ``cluster``, tests/animfleet/region/conftest.py)."""
    return "single"


@pytest.fixture
def store_url(store_kind: str, servers: LocalFleet, request: pytest.FixtureRequest) -> str:
    """The URL of ``redis_client``'s store: database 15 of the private Redis, or the cluster."""
    if store_kind == "cluster":
        running: LocalCluster = request.getfixturevalue("cluster")
        return running.url
    return f"redis://127.0.0.1:{servers.redis_port}/15"


@pytest.fixture
def store_region(store_url: str, servers: LocalFleet) -> Callable[[str], Region]:
    """``store_region(name)``: a region whose store is ``redis_client``'s; its broker is
    database 15 of the private Redis (the store itself, unless the store is the cluster)."""
    broker = f"redis://127.0.0.1:{servers.redis_port}/15"

    def build(name: str) -> Region:
        return Region(
            name=name, broker_url=broker, store_url="" if store_url == broker else store_url
        )

    return build


@pytest.fixture
def broker_client(servers: LocalFleet, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """The broker of ``store_region``'s regions, emptied: ``redis_client`` itself when the
    store is the broker; else database 15 of the private Redis, beside the cluster store."""
    client = redis.Redis(port=servers.redis_port, db=15)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def redis_client(store_url: str) -> Iterator[redis.Redis]:
    """An empty store for one test (a cluster's FLUSHDB empties every master)."""
    client = store_client(store_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


EmptyDbs = Callable[[Mapping[str, int]], dict[str, redis.Redis]]


@pytest.fixture
def empty_dbs(servers: LocalFleet) -> Iterator[EmptyDbs]:
    """Empty databases of the private Redis by name (``{"b1": 13}``), emptied again after."""
    opened: list[redis.Redis] = []

    def open_dbs(numbers: Mapping[str, int]) -> dict[str, redis.Redis]:
        clients = {name: redis.Redis(port=servers.redis_port, db=n) for name, n in numbers.items()}
        for client in clients.values():
            client.flushdb()
        opened.extend(clients.values())
        return clients

    yield open_dbs
    for client in opened:
        client.flushdb()


@pytest.fixture(scope="session")
def shipped_model() -> Path:
    """The model the project trains and ships (models/animfleet-small): what fleets run."""
    from animfleet.shipped_models import shipped_model as find

    path = find()
    assert path is not None, "models/animfleet-small is missing"
    return path


@pytest.fixture(scope="session")
def random_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workers.model.pipelines.build import init_model

    return init_model(tmp_path_factory.mktemp("models") / "random")


def _png(width: int = 64, height: int = 64, seed: int = 0, fmt: str = "PNG") -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.fixture
def regions_on_redis(servers: LocalFleet, tmp_path: Path) -> Callable[..., Topology]:
    """``regions_on_redis("one", "two")``: a topology of those regions on the private Redis,
    the first on database 15 (``redis_client``'s), the next on 14 and so on, each storing to a
    directory of its own."""

    def build(*names: str) -> Topology:
        regions = {
            name: {
                "broker_url": f"redis://127.0.0.1:{servers.redis_port}/{15 - index}",
                "storage": {"backend": "local", "root": str(tmp_path / name)},
            }
            for index, name in enumerate(names)
        }
        return Topology.from_mapping({"regions": regions}, env={})

    return build


@pytest.fixture
def make_image() -> Callable[..., bytes]:
    """Encode a random RGB image: ``make_image(width, height, seed, fmt)``."""
    return _png


@pytest.fixture
def png_header_claiming() -> Callable[[int, int], bytes]:
    """A PNG whose header claims ``width x height`` with almost no data: a decompression bomb."""

    def build(width: int, height: int) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            crc = struct.pack(">I", zlib.crc32(kind + data))
            return struct.pack(">I", len(data)) + kind + data + crc

        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\0"))
            + chunk(b"IEND", b"")
        )

    return build
