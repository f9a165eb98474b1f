"""Prometheus plumbing every process shares: the ``/metrics`` server and the histogram buckets.

The metric definitions live with the code that counts them (``dispatcher/metrics.py``,
``workers/metrics.py``); this module only knows how to expose them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

from pydantic import Field

from animfleet.settings import EnvSettings, load

# No prometheus_client import at module level: use_multiprocess_dir() must run before it.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds, from a fast queue hop to a job that waited out a spike.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200)


class MetricsPortEnv(EnvSettings):
    """One ``*_PORT`` variable; its name less ``PORT`` is given as the prefix when read."""

    port: int | None = Field(default=None, ge=0, le=65535)


def port_from_env(name: str) -> int | None:
    """The port in ``$name`` (e.g. ``ANIMFLEET_ROUTER_METRICS_PORT``); ``None`` when unset/0.

    Raises :class:`animfleet.settings.SettingsError` when it is not a port number."""
    if not name.upper().endswith("PORT"):
        raise ValueError(f"a port variable's name ends in PORT, got {name!r}")
    # pydantic-settings reads ``prefix + field``: the name splits into a prefix and ``port``.
    port = load(MetricsPortEnv, env_prefix=name[: -len("PORT")]).port
    return port or None


def use_multiprocess_dir() -> str:
    """Point prometheus-client at a fresh directory shared with forked children.

    Celery's prefork pool child runs the jobs; the main process serves ``/metrics``, summing
    every child's files, including those of a child that was killed. Metrics created before
    this call keep in-process values; the worker's own are created later, in the child.
    """
    path = os.environ.get(MULTIPROC_ENV) or ""
    if not path:
        path = tempfile.mkdtemp(prefix="animfleet-metrics-")
        atexit.register(shutil.rmtree, path, True)  # ours alone: gone with the worker
    shutil.rmtree(path, ignore_errors=True)  # counters from an earlier run are not ours
    os.makedirs(path)
    os.environ[MULTIPROC_ENV] = path
    values = sys.modules.get("prometheus_client.values")
    if values is not None:  # imported already (the CLI imports the dispatcher): switch it over
        # Metrics created from now on keep their values in files.
        values.ValueClass = values.get_value_class()  # type: ignore[attr-defined]
    return path


def serve(port: int, host: str = "0.0.0.0") -> None:  # scraped from inside the VPC
    """Serve ``/metrics`` on ``port`` from a daemon thread (multiprocess-aware)."""
    from prometheus_client import CollectorRegistry, start_http_server

    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        start_http_server(port, addr=host, registry=registry)
    else:
        start_http_server(port, addr=host)
