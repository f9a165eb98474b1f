"""The store client: what it asks of the server holding the store's keys, on either kind."""

from __future__ import annotations

import pytest
import redis

from animfleet.region.keys import KEY_PREFIX
from animfleet.region.store_client import server_info
from launcher.local_cluster import LocalCluster


def test_server_info_comes_from_the_node_serving_the_stores_slot(
    redis_client: redis.Redis, store_kind: str, request: pytest.FixtureRequest
) -> None:
    port = int(server_info(redis_client, "server")["tcp_port"])
    if store_kind == "cluster":
        cluster: LocalCluster = request.getfixturevalue("cluster")
        assert port == cluster.master_of(KEY_PREFIX)
    else:
        assert port == redis_client.connection_pool.connection_kwargs["port"]
