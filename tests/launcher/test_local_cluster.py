"""The local Redis Cluster starts whole even when a port it picked is taken meanwhile."""

from __future__ import annotations

import socket
from pathlib import Path

from animfleet.region.keys import KEY_PREFIX
from animfleet.region.store_client import store_client
from launcher.local_cluster import LocalCluster


def test_a_node_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cluster = LocalCluster(tmp_path)
        cluster.ports[0] = taken.getsockname()[1]  # as if another process bound it meanwhile
        with cluster:
            assert taken.getsockname()[1] not in cluster.ports
            assert all(cluster.node_ok(port) for port in cluster.ports)
            client = store_client(cluster.url)
            client.set(KEY_PREFIX + "x", "1")
            assert client.get(KEY_PREFIX + "x") == b"1"
            client.close()
