"""The store-level suites run on one Redis and on a Redis Cluster (three masters, replicas)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["single", "cluster"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each test here runs on both kinds of store; ``redis_client`` follows."""
    return str(request.param)
