"""The scheduler's turn at a region's broker outbox (:mod:`animfleet.region.broker_outbox`):
relay what is due, queue again or fail what the broker dead-lettered, and say how far behind
the outbox is (``animfleet_broker_outbox_overdue_seconds``, ``..._quarantined``)."""

from __future__ import annotations

import structlog

from animfleet.region.broker_outbox import BrokerOutbox
from dispatcher import metrics

log = structlog.stdlib.get_logger("animfleet.scheduler")


def tend_outbox(outbox: BrokerOutbox, max_deliveries: int, stale_after_s: float) -> float:
    """One relay pass over ``outbox``; returns how long its oldest entry has been overdue."""
    region = outbox.region.name
    outbox.relay()
    outbox.end_dead_letters(max_deliveries)
    overdue_s = outbox.overdue_s()
    quarantined = outbox.quarantined()
    metrics.OUTBOX_OVERDUE.labels(region).set(overdue_s)
    metrics.OUTBOX_QUARANTINED.labels(region).set(quarantined)
    if overdue_s >= stale_after_s:  # the broker has been away (or refusing) this long
        log.error("broker.outbox_stale", region=region, overdue_s=round(overdue_s, 1))
    return overdue_s
