"""The sweeper process (``animfleet sweeper``): nothing a region holds waits for ever.

One thread per region; every ``poll_s`` it ends queued jobs past their start deadline
``expired`` (without a GPU, even when no worker is free to receive them) and runs one sweep
(:class:`animfleet.region.sweeper.Sweeper`: jobs of a lost worker back on the queue, jobs of a
workerless region ended ``no_capacity``, finished records archived). Several copies are safe:
each sweep holds the region's short lease, and every change is a transaction on the record, so
a second copy (or a restarted one) takes over within a lease when one dies.
"""

from __future__ import annotations

import threading
import time

import structlog

from animfleet.metrics import port_from_env, serve
from animfleet.region.joblogs import keep_job_logs_of
from animfleet.region.jobstore import JobStore
from animfleet.region.sweeper import Sweeper, SweepSettings
from animfleet.topology import Region, Topology
from storage import open_store

log = structlog.stdlib.get_logger("animfleet.sweeper")


def sweep_region(region: Region, settings: SweepSettings, stop: threading.Event) -> None:
    """Sweep ``region`` every ``settings.poll_s`` until ``stop`` is set."""
    store = JobStore.from_url(region.store)
    sweeper = Sweeper(region, store, settings, objects=open_store(region.storage))
    while not stop.is_set():
        try:
            now = time.time()
            for job_id in store.expire_overdue(region.name, now):
                log.info("job.transition", job_id=job_id, status="expired", region=region.name)
            sweeper.sweep(now)
        except Exception:  # the region's Redis is briefly away: every job is still there
            log.exception("sweeper.pass_failed", region=region.name)
        stop.wait(settings.poll_s)


def run_sweeper(
    topology: Topology,
    regions: list[str],
    settings: SweepSettings | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Sweep ``regions`` (one thread each) until ``stop`` is set (or forever)."""
    settings = settings or SweepSettings.from_env()
    if port := port_from_env("ANIMFLEET_SWEEPER_METRICS_PORT"):
        serve(port)
    stop = stop or threading.Event()
    keep_job_logs_of(topology, regions)
    threads = [
        threading.Thread(
            target=sweep_region,
            args=(topology.region(name), settings, stop),
            name=f"sweeper-{name}",
        )
        for name in regions
    ]
    for thread in threads:
        thread.start()
    log.info("sweeper.started", regions=regions, poll_s=settings.poll_s)
    for thread in threads:
        thread.join()
