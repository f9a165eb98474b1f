"""A private RabbitMQ node for an embedded fleet, where ``rabbitmq-server`` is installed.

The node is the fleet's own: its name (``animfleet-<port>@localhost``), AMQP and distribution
ports, database, logs, plugins file and Erlang cookie (``HOME``) all live under the fleet's
directory, so it never meets a RabbitMQ the machine runs as a service. Its queues are quorum
queues (:mod:`animfleet.region.broker`), on one node here: the same code a replicated cluster
runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# The node's own script: /usr/sbin/rabbitmq-server switches to the service's user and home.
SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin",)


def rabbitmq_server() -> str | None:
    """The ``rabbitmq-server`` to run, or ``None`` where none is installed."""
    for folder in SCRIPT_DIRS:
        candidate = Path(folder) / "rabbitmq-server"
        if candidate.exists():
            return str(candidate)
    return shutil.which("rabbitmq-server")


def rabbitmq_available() -> bool:
    return rabbitmq_server() is not None


def node_name(port: int) -> str:
    return f"animfleet-{port}@localhost"


def amqp_url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}//"


def rabbitmq_env(root: Path, port: int, dist_port: int) -> dict[str, str]:
    """The environment of a node listening on ``port`` that keeps everything under
    ``root/rabbitmq`` (the same directory again after a restart: its queues are kept)."""
    base = root / "rabbitmq"
    home = base / "home"  # the Erlang cookie the node and rabbitmqctl share
    home.mkdir(parents=True, exist_ok=True)
    plugins = base / "enabled_plugins"
    if not plugins.exists():
        plugins.write_text("[].\n")
    return {
        "HOME": str(home),
        "RABBITMQ_NODENAME": node_name(port),
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),  # absent: defaults
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
        "RABBITMQ_PID_FILE": str(base / "node.pid"),
        "RABBITMQ_LOGS": "-",  # to the process's output, the fleet's log file
        # A private node must not pick up a service's settings from /etc.
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
    }


def ready(port: int) -> bool:
    """Whether the node on ``port`` accepts AMQP connections (it listens once booted)."""
    from kombu import Connection

    connection = Connection(amqp_url(port), connect_timeout=1)
    try:
        connection.ensure_connection(max_retries=0)
        return True
    finally:
        connection.collect()  # closes the socket of a refused connection too


def argv() -> list[str]:
    server = rabbitmq_server()
    if server is None:
        raise RuntimeError("rabbitmq-server is not installed here")
    return [server]
