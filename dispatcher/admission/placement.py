"""Where a new job runs: the routing table's draw, each region's admission limit, and backoff.

The router writes the table (and the loads behind it) to every region's Redis; a dispatcher
keeps a copy refreshed by a background thread, so a submit costs no extra round trip. The copy
is only a guide: the atomic admission script in the chosen region has the last word, and a
region that refuses is treated as full for the rest of that attempt. When every region the
table allows is full, :func:`dispatcher.admission.regions.admit` retries with jittered exponential
backoff and finally raises :class:`dispatcher.admission.regions.AtCapacity`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import redis
import structlog

from animfleet.region.admission import admission_limit
from animfleet.region.keys import ROUTING_KEY
from dispatcher.admission.regions import (
    RetrySchedule,
    admit,
    choose_region,
    execution_delay_s,
    source_utilization,
)
from dispatcher.admission.settings import AdmissionSettings
from dispatcher.routing import RoutingTable

log = structlog.stdlib.get_logger("animfleet.dispatcher")

UNKNOWN_CAPACITY = 1 << 30  # a region the router has not reported: let its own script decide


@dataclass(frozen=True)
class RoutingSnapshot:
    """The table in force and the loads it was computed from."""

    table: RoutingTable
    live: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)


class RoutingCache:
    """The router's latest document, read from one region's Redis in the background.

    A table older than ``stale_after_s`` (the router died or is cut off) is replaced by
    home-only routing: every job stays home, which needs no fresh knowledge of other regions.
    """

    def __init__(
        self,
        client: redis.Redis,
        regions: list[str],
        refresh_s: float = 1.0,
        stale_after_s: float = 20.0,
    ) -> None:
        self.client, self.regions = client, regions
        self.refresh_s, self.stale_after_s = refresh_s, stale_after_s
        self._document: RoutingSnapshot | None = None
        # Home-only routing needs no fresh knowledge: one table serves every submit.
        self._home_only = RoutingSnapshot(RoutingTable.home_only(regions, computed_at=time.time()))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="routing-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def refresh(self) -> None:
        try:
            raw = self.client.get(ROUTING_KEY)
        except redis.RedisError as error:
            log.warning("routing_cache.refresh_failed", error=str(error))
            return  # keep the last document; staleness decides when to stop trusting it
        if raw is None:
            return
        document = json.loads(raw)
        loads = document.get("loads", {})
        self._document = RoutingSnapshot(
            table=RoutingTable.from_json(json.dumps(document["table"])),
            live={name: int(v[0]) for name, v in loads.items()},
            held={name: int(v[1]) + int(v[2]) for name, v in loads.items()},
        )

    def snapshot(self, now: float | None = None) -> RoutingSnapshot:
        now = time.time() if now is None else now
        document = self._document
        if document is None or now - document.table.computed_at > self.stale_after_s:
            return self._home_only
        return document

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh()


# Tries to take the job into a region atomically; True when the region admitted it.
TryAdmit = Callable[[str], bool]


class Placement:
    """Picks and admits the region for each new job."""

    def __init__(
        self,
        regions: list[str],
        cache: RoutingCache | None,
        settings: AdmissionSettings | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        siblings: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``siblings``: each cell's sibling cells, tried before any other region."""
        self.regions, self.cache = regions, cache
        self.siblings = siblings or {}
        self.settings = settings or AdmissionSettings()
        self.schedule = RetrySchedule.backoff(self.settings)
        self.rng = rng or random.Random()
        self.sleep = sleep

    def _snapshot(self) -> RoutingSnapshot:
        if self.cache is None:
            return RoutingSnapshot(RoutingTable.home_only(self.regions, computed_at=time.time()))
        return self.cache.snapshot()

    def place(
        self, home: str, try_admit: TryAdmit, on_full: Callable[[], None] | None = None
    ) -> str | None:
        """The region that admitted the job. With the backlog on, ``None`` when no region can
        take it now (the caller puts it in the home backlog); off, it retries and raises
        :class:`AtCapacity` when none would.

        ``on_full`` is called each time every allowed region turned the job away (before the
        backoff sleep).
        """
        first = self._snapshot()
        live = {r: first.live.get(r, UNKNOWN_CAPACITY) for r in self.regions}
        delay = 0.0
        if not self.settings.backlog:  # the backlog orders a burst by itself
            utilization = source_utilization(first.table, home, first.held, live)
            delay = execution_delay_s(utilization, self.rng, self.settings)
        if delay:
            self.sleep(delay)  # spread a burst out so it does not start in lockstep
        # Undelayed, the first attempt uses the snapshot just taken; each retry (and the
        # attempt after a delay) takes a fresh one.
        unused = [] if delay else [first]

        def choose() -> str | None:
            snap = unused.pop() if unused else self._snapshot()
            live = {r: snap.live.get(r, UNKNOWN_CAPACITY) for r in self.regions}
            held = dict(snap.held)
            while True:
                region = choose_region(
                    snap.table,
                    home,
                    held,
                    live,
                    self.rng,
                    self.settings,
                    self.siblings.get(home, ()),
                )
                if region is None:
                    if on_full is not None:
                        on_full()
                    return None
                if try_admit(region):
                    return region
                # full after all
                held[region] = admission_limit(live[region], self.settings.allowance)

        if self.settings.backlog:
            return choose()
        return admit(home, choose, self.schedule, self.sleep)
