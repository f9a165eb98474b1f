"""The dispatcher's (gateway's) and router's Prometheus metrics."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge

from animfleet.region.status import RegionStatus

JOBS_SUBMITTED = Counter(
    "animfleet_jobs_submitted_total",
    "Jobs admitted, by home region and the region that took them",
    ["home_region", "region"],
)
SPILLOVER = Counter(
    "animfleet_spillover_total",
    "Jobs admitted outside their home region, by source (home) and target region",
    ["source", "target"],
)
VERSION_PICKS = Counter(
    "animfleet_jobs_by_version_total",
    "Jobs admitted, by the region that took them and the model version picked for them",
    ["region", "version"],
)
ADMISSION_WAITS = Counter(
    "animfleet_admission_backoffs_total",
    "Times every allowed region was full and a submit backed off",
    ["home_region"],
)
REJECTED = Counter(
    "animfleet_jobs_rejected_total",
    "Submits refused after the retry budget (HTTP 429 at_capacity)",
    ["home_region"],
)
HTTP_RESPONSES = Counter(
    "animfleet_gateway_responses_total",
    "Gateway responses by method, route template and status code",
    ["method", "route", "status"],
)

# The router's view of every region, refreshed each routing period.
LIVE_WORKERS = Gauge("animfleet_region_live_workers", "Workers with a live heartbeat", ["region"])
IN_FLIGHT = Gauge("animfleet_region_busy_workers", "Workers running a job (in flight)", ["region"])
QUEUE_DEPTH = Gauge("animfleet_region_queue_depth", "Jobs queued, not started", ["region"])
QUEUE_AGE = Gauge(
    "animfleet_region_oldest_queued_seconds", "Age of the oldest queued job", ["region"]
)
BACKLOG = Gauge(
    "animfleet_region_backlog", "Jobs waiting in the region's backlog (no GPU yet)", ["region"]
)
IN_FLIGHT_JOBS = Gauge(
    "animfleet_region_in_flight", "Jobs running or on the region's GPU queue", ["region"]
)
SCALING_SIGNAL = Gauge(
    "animfleet_region_scaling_signal",
    "(backlog + in_flight) / max(live_workers, 1): what the GPU group scales on",
    ["region"],
)
REGION_UP = Gauge(
    "animfleet_region_reachable", "1 if the router reached the region's Redis", ["region"]
)
ROUTING_SHARE = Gauge(
    "animfleet_routing_share",
    "Share of a source region's new jobs a target takes",
    ["source", "target"],
)
ROUTING_TABLES = Counter("animfleet_routing_tables_total", "Routing tables computed")


BACKLOG_MOVES = Counter(
    "animfleet_backlog_moves_total",
    "Backlog jobs the scheduler moved onto a GPU queue, by backlog region and target region",
    ["region", "target"],
)
BACKLOGGED = Counter(
    "animfleet_jobs_backlogged_total",
    "Jobs accepted into their home region's backlog (no GPU free at submit)",
    ["home_region"],
)


def admitted(home: str, region: str, backlog: bool = False, version: str | None = None) -> None:
    JOBS_SUBMITTED.labels(home, region).inc()
    VERSION_PICKS.labels(region, version or "worker-default").inc()
    if backlog:
        BACKLOGGED.labels(home).inc()
    if region != home:
        SPILLOVER.labels(home, region).inc()


def observe_regions(
    names: list[str],
    status: Mapping[str, RegionStatus],
    shares: Mapping[str, Mapping[str, float]],
) -> None:
    """Set the router's gauges from one tick's status and table."""
    for name in names:
        region = status.get(name)
        REGION_UP.labels(name).set(1 if region else 0)
        if region is None:
            continue
        LIVE_WORKERS.labels(name).set(region.load.live_workers)
        IN_FLIGHT.labels(name).set(region.load.busy_workers)
        QUEUE_DEPTH.labels(name).set(region.load.queue_depth)
        QUEUE_AGE.labels(name).set(region.oldest_queued_age_s)
        BACKLOG.labels(name).set(region.backlog)
        IN_FLIGHT_JOBS.labels(name).set(region.load.in_flight)
        SCALING_SIGNAL.labels(name).set(region.scaling_signal)
    for source, targets in shares.items():
        for target in names:
            ROUTING_SHARE.labels(source, target).set(targets.get(target, 0.0))
    ROUTING_TABLES.inc()


# The broker outbox of a region whose broker is apart from its store (set by its scheduler).
OUTBOX_OVERDUE = Gauge(
    "animfleet_broker_outbox_overdue_seconds",
    "How long the oldest broker-outbox entry has been due and unpublished",
    ["region"],
)
OUTBOX_QUARANTINED = Gauge(
    "animfleet_broker_outbox_quarantined",
    "Broker-outbox entries set aside because the broker refused them for good",
    ["region"],
)
