"""The router process: every few seconds, region loads in, a routing table out to every region.

Each region's Redis gets the same table, so a dispatcher reads it from its own region and a
region cut off from the router keeps the last table it was given (dispatchers fall back to
home-only once that table is stale).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import redis
import structlog
from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from animfleet.metrics import port_from_env, serve
from animfleet.region.keys import ROUTING_KEY
from animfleet.region.status import RegionStatus, read_region_status
from animfleet.region.store_client import store_client
from animfleet.settings import EnvSettings, load
from animfleet.topology import Topology
from dispatcher import metrics
from dispatcher.routing import (
    RegionLoad,
    Ring,
    RoutingSettings,
    RoutingTable,
    compute_routing_table,
)

log = structlog.stdlib.get_logger("animfleet.router")

PublishStatus = Callable[[dict[str, RegionStatus]], None]


def table_document(table: RoutingTable, loads: dict[str, RegionLoad]) -> str:
    """The JSON stored under ``ROUTING_KEY``: the table plus the loads it was computed from."""
    return json.dumps(
        {
            "table": json.loads(table.to_json()),
            "loads": {
                name: [load.live_workers, load.busy_workers, load.queue_depth]
                for name, load in loads.items()
            },
        },
        separators=(",", ":"),
    )


class RoutingEnv(EnvSettings):
    """``ANIMFLEET_ROUTING_<FIELD>`` for the :class:`RoutingSettings` thresholds (documented
    there) and ``ANIMFLEET_ROUTING_RINGS``, checked here so that a bad value names its variable.
    ``None``: :class:`RoutingSettings`' default."""

    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_ROUTING_")

    home_target: float | None = Field(default=None, gt=0, le=1)
    spill_target: float | None = Field(default=None, gt=0, le=1)
    step: float | None = Field(default=None, gt=0, le=1)
    max_share_change: float | None = Field(default=None, gt=0, le=1)
    min_share: float | None = Field(default=None, ge=0, lt=0.5)
    # "latency_ms:pressure" pairs, innermost first: "60:0,150:1.1,300:1.3,inf:1.6".
    rings: tuple[tuple[float, float], ...] | None = None

    @field_validator("rings", mode="before")
    @classmethod
    def _split_rings(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        rings = [ring.strip().split(":") for ring in value.split(",") if ring.strip()]
        if any(len(ring) != 2 for ring in rings):
            raise ValueError("each ring is latency_ms:pressure, e.g. 60:0,150:1.1,inf:1.6")
        return tuple(tuple(ring) for ring in rings)

    @field_validator("rings")
    @classmethod
    def _rings_ordered(
        cls, value: tuple[tuple[float, float], ...] | None
    ) -> tuple[tuple[float, float], ...] | None:
        if value is None:
            return value
        bounds = [ms for ms, _ in value]
        if not bounds:
            raise ValueError("needs at least one ring")
        if bounds != sorted(bounds):
            raise ValueError(f"rings must be ordered by latency bound, got {bounds}")
        return value

    def routing_settings(self) -> RoutingSettings:
        values: dict[str, Any] = self.model_dump(exclude_none=True, exclude={"rings"})
        if self.rings is not None:
            values["rings"] = tuple(Ring(ms, pressure) for ms, pressure in self.rings)
        return RoutingSettings(**values)


def routing_settings_from_env(env: Mapping[str, str] | None = None) -> RoutingSettings:
    """``ANIMFLEET_ROUTING_<FIELD>`` overrides (HOME_TARGET, SPILL_TARGET, STEP,
    MAX_SHARE_CHANGE, MIN_SHARE) and ``ANIMFLEET_ROUTING_RINGS`` as ``ms:pressure,...``
    (e.g. ``60:0,150:1.1,300:1.3,inf:1.6``, the default).

    Raises :class:`animfleet.settings.SettingsError`."""
    return load(RoutingEnv, env).routing_settings()


def demand_by_home(status: dict[str, RegionStatus]) -> dict[str, float]:
    """Each home region's demand in GPUs: its jobs held anywhere plus those waiting for room.

    In-flight counts per region cannot show how far a home region is overloaded once admission
    caps them; counting the jobs *of* each home (wherever they run, and those the dispatchers
    hold back) can. By Little's law this equals arrival rate times time in the system.
    """
    demand = {name: float(region.waiting) for name, region in status.items()}
    for region in status.values():
        for home, count in region.holding.items():
            demand[home] = demand.get(home, 0.0) + count
    return demand


@dataclass
class Router:
    topology: Topology
    settings: RoutingSettings = field(default_factory=routing_settings_from_env)
    period_s: float = 2.0
    publish_status: PublishStatus | None = None  # e.g. CloudWatch metrics for autoscaling
    previous: RoutingTable | None = None
    _clients: dict[str, redis.Redis] = field(default_factory=dict)

    def client(self, region: str) -> redis.Redis:
        if region not in self._clients:
            url = self.topology.region(region).store
            self._clients[region] = store_client(url, socket_timeout=2.0)
        return self._clients[region]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def read_status(self) -> dict[str, RegionStatus]:
        """Status of the regions that answered; one that did not counts as down."""
        status: dict[str, RegionStatus] = {}
        for name, region in self.topology.regions.items():
            try:
                status[name] = read_region_status(self.client(name), region, self.topology.names)
            except redis.RedisError as error:
                log.warning("router.region_unreachable", region=name, error=str(error))
        return status

    def tick(self) -> RoutingTable:
        """Compute one table from fresh loads and write it to every reachable region."""
        status = self.read_status()
        demand = demand_by_home(status)
        loads = {
            name: replace(region.load, demand=demand.get(name, 0.0))
            for name, region in status.items()
        }
        table = compute_routing_table(
            self.topology, loads, self.previous, self.settings, now=time.time()
        )
        document = table_document(table, loads)
        for name in self.topology.names:
            try:
                self.client(name).set(ROUTING_KEY, document)
            except redis.RedisError as error:
                log.warning("router.write_failed", region=name, error=str(error))
        metrics.observe_regions(self.topology.names, status, table.shares)
        if self.publish_status is not None:
            try:
                self.publish_status(status)
            except Exception as error:  # metrics must never stop routing
                log.warning("router.metrics_failed", error=str(error))
        if self.previous is None or table.shares != self.previous.shares:
            log.info("router.table_changed", shares=table.shares, demand=demand)
        self.previous = table
        return table

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        if port := port_from_env("ANIMFLEET_ROUTER_METRICS_PORT"):
            serve(port)
        log.info("router.started", regions=self.topology.names, period_s=self.period_s)
        while not stop.is_set():
            started = time.monotonic()
            self.tick()
            stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))
