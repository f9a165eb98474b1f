"""A delivery a worker cannot run now, sent again rather than rejected (RabbitMQ only).

On RabbitMQ's quorum queues every reject counts toward the queue's delivery limit, past which the
message is dead-lettered. Two reasons to put a job back are no fault of the job's:

- its run is alive elsewhere (:class:`animfleet.region.runs.LeaseHeld`): the delivery waits in
  the store's outbox, due later (:func:`defer_in_store`), as quorum queues hold no ETA messages;
- the job store is unreachable: the worker publishes the job's message anew (delivery count
  zero) and acks the one it holds (:func:`hand_back`), so an outage of any length never
  dead-letters a job. The worker's store retries pace it: it takes its next message only after
  them, as a reject would.
"""

from __future__ import annotations

import threading

import structlog

from animfleet.region.broker import BrokerLink
from animfleet.region.broker_outbox import BrokerOutbox
from animfleet.region.jobstore import JobStore
from animfleet.region.messages import AnimateMessages
from animfleet.topology import Region

log = structlog.stdlib.get_logger("animfleet.worker")

_links: dict[str, BrokerLink] = {}  # one per region and process, thread-safe itself
_links_lock = threading.Lock()


def _link(region: Region) -> BrokerLink:
    with _links_lock:
        if region.name not in _links:
            _links[region.name] = BrokerLink(region)
        return _links[region.name]


def defer_in_store(
    store: JobStore, region: Region, job_id: str, deferrals: int, countdown: float
) -> None:
    """Deliver ``job_id`` again in ``countdown`` seconds, through the store's outbox."""
    message = AnimateMessages(region).build(job_id, retries=deferrals)
    BrokerOutbox(store, region, _link(region)).defer(region.queue, message, countdown)


def hand_back(region: Region, job_id: str, retries: int, reason: str) -> None:
    """Publish ``job_id``'s message again (confirmed) for another delivery; the caller then
    acks its own. Raises :class:`animfleet.region.broker.BrokerUnavailable`."""
    _link(region).publish(region.queue, AnimateMessages(region).build(job_id, retries=retries))
    log.warning("job.handed_back", job_id=job_id, region=region.name, reason=reason)
