"""The one place a region's store client is made, from the region's store URL.

``redis://`` and ``rediss://`` name one Redis; ``redis+cluster://`` and ``rediss+cluster://``
name a Redis Cluster (MemoryDB runs only in cluster mode) by any one of its nodes, and get a
cluster client that follows the slot map and its failovers. Every key of a region's store shares
one hash tag (:data:`animfleet.region.keys.KEY_PREFIX`), so its scripts and transactions stay in
one slot either way.

Every client has a connect timeout and a socket timeout (:class:`StoreClientSettings`,
``ANIMFLEET_STORE_*``), so a stalled Redis fails a call instead of pinning its thread, and a
stated retry: a command that fails with a connection error or a timeout is sent again up to
``retries`` times with jittered exponential backoff; no other error is retried. A command
that may be sent twice so is written to be idempotent: the admission script and the record
transactions recognise a write of their own (:mod:`.admission`, :mod:`.runs`). The worst a
stalled server costs one command is ``(retries + 1) * (socket_timeout_s + backoff_cap_s)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import redis
from pydantic import Field
from pydantic_settings import SettingsConfigDict
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from animfleet.region.keys import KEY_PREFIX
from animfleet.settings import EnvSettings, load

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


class StoreClientSettings(EnvSettings):
    """``ANIMFLEET_STORE_*``: how every process's store clients wait and retry."""

    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_STORE_")

    connect_timeout_s: float = Field(default=2.0, gt=0)
    socket_timeout_s: float = Field(default=5.0, gt=0)  # one reply; longer than any script
    retries: int = Field(default=2, ge=0, le=10)  # resends after a connection error/timeout
    backoff_base_s: float = Field(default=0.05, gt=0)
    backoff_cap_s: float = Field(default=1.0, gt=0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreClientSettings:
        return load(cls, env)


def store_client(
    url: str, settings: StoreClientSettings | None = None, **options: Any
) -> redis.Redis:
    """A client of the store at ``url``, with ``settings``' timeouts and retries (from the
    environment when not given; ``options`` override them).

    A cluster client answers the same commands for keys of one slot; the region code is typed
    against :class:`redis.Redis`, which is what it uses of either.
    """
    settings = settings or StoreClientSettings.from_env()
    backoff = ExponentialWithJitterBackoff(cap=settings.backoff_cap_s, base=settings.backoff_base_s)
    options.setdefault("socket_connect_timeout", settings.connect_timeout_s)
    options.setdefault("socket_timeout", settings.socket_timeout_s)
    options.setdefault("retry", Retry(backoff, settings.retries))
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
