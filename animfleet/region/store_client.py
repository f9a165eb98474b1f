"""The one place a region's store client is made, from the region's store URL.

``redis://`` and ``rediss://`` name one Redis; ``redis+cluster://`` and ``rediss+cluster://``
name a Redis Cluster (MemoryDB runs only in cluster mode) by any one of its nodes, and get a
cluster client that follows the slot map and its failovers. Every key of a region's store shares
one hash tag (:data:`animfleet.region.keys.KEY_PREFIX`), so its scripts and transactions stay in
one slot either way.
"""

from __future__ import annotations

from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from animfleet.region.keys import KEY_PREFIX

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


def store_client(url: str, **options: Any) -> redis.Redis:
    """A client of the store at ``url``.

    A cluster client answers the same commands for keys of one slot; the region code is typed
    against :class:`redis.Redis`, which is what it uses of either.
    """
    options.setdefault("health_check_interval", 30)
    scheme, rest = url.split("://", 1)
    if scheme in CLUSTER_SCHEMES:
        options.pop("health_check_interval")
        cluster = RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}", **options)
        return cast(redis.Redis, cluster)
    return redis.Redis.from_url(url, **options)


def server_info(client: redis.Redis, section: str) -> dict[str, Any]:
    """``INFO section`` of the server holding the store's keys: on a cluster, the master now
    serving the store's slot (a plain INFO there asks some node, whose uptime says nothing
    about the store's)."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(KEY_PREFIX)
        return cast(dict[str, Any], client.info(section, target_nodes=node))
    info: dict[str, Any] = client.info(section)
    return info
