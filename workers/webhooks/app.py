"""The ``webhooks`` process of a region: a CPU Celery worker on queue ``webhooks.<region>``.

Besides running delivery tasks (a thread pool: the work is waiting on receivers), its main
process runs one :class:`Scheduler` thread that every ``poll_s`` claims due deliveries from the
region's durable schedule and publishes one task each. Expiring and recovering jobs is the
sweeper process's work (:mod:`workers.sweeping`), so it goes on while this one is down.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import structlog
from celery import Celery, signals

from animfleet import logs
from animfleet.constants import WEBHOOK_QUEUE_PREFIX, WEBHOOK_TASK
from animfleet.metrics import port_from_env, serve
from animfleet.netguard import NetGuard
from animfleet.region.broker import celery_broker_config, task_queue
from animfleet.region.joblogs import keep_job_logs
from animfleet.region.jobstore import JobStore
from animfleet.region.outbox import DueSet, mark_sender_alive
from animfleet.topology import Region
from storage import open_store
from workers.webhooks.sender import Sender
from workers.webhooks.settings import WebhookSettings

log = structlog.stdlib.get_logger("animfleet.webhooks")


def queue_name(region: Region) -> str:
    return WEBHOOK_QUEUE_PREFIX + region.name


class Scheduler:
    """Moves due deliveries onto the Celery queue."""

    def __init__(self, app: Celery, sender: Sender, region: Region) -> None:
        self.app, self.sender, self.region = app, sender, region
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="webhook-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> int:
        """One pass; returns how many deliveries were handed to the queue."""
        now = time.time()
        lease_until = now + self.sender.settings.lease_s
        claimed = self.sender.due.claim(now, lease_until)
        for delivery_id in claimed:
            self.app.send_task(
                WEBHOOK_TASK,
                args=[delivery_id, lease_until],
                queue=queue_name(self.region),
                retry=True,
            )
        alive_s = max(5.0, 3 * self.sender.settings.poll_s)
        mark_sender_alive(self.sender.store.redis, self.region.name, alive_s)
        return len(claimed)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.tick()
            except Exception:  # the broker is briefly away: the schedule is still in Redis
                log.exception("webhook.scheduler_error", region=self.region.name)
                busy = 0
            if not busy:
                self._stop.wait(self.sender.settings.poll_s)


def create_app(region: Region, settings: WebhookSettings, netguard: NetGuard) -> Celery:
    """The Celery app of ``region``'s webhooks process (tasks and scheduler)."""
    app = Celery(f"animfleet-webhooks-{region.name}")
    app.conf.update(
        broker_url=region.broker_url,
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # A lost message costs nothing: its delivery's lease runs out and it is claimed again.
        task_acks_late=False,
        # On RabbitMQ a quorum queue too; no dead letters (a lost message costs nothing).
        task_queues=[task_queue(region.broker_url, queue_name(region))],
        task_default_queue=queue_name(region),
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        **celery_broker_config(region.broker_url, {}),
    )
    store = JobStore.from_url(region.store)
    keep_job_logs({region.name: store.redis})
    sender = Sender(
        store=store,
        due=DueSet(store.redis, region.name),
        settings=settings,
        netguard=netguard,
        objects=open_store(region.storage),
        presign_expiry_s=region.storage.presign_expiry_s,
    )
    scheduler = Scheduler(app, sender, region)

    @app.task(name=WEBHOOK_TASK)  # type: ignore[untyped-decorator]
    def deliver(delivery_id: str, lease_until: float) -> None:
        sender.deliver(delivery_id, lease_until)

    signals.worker_ready.connect(lambda **_: scheduler.start(), weak=False)
    signals.worker_shutdown.connect(lambda **_: scheduler.stop(), weak=False)
    signals.setup_logging.connect(lambda **_: logs.configure(), weak=False)
    app.conf.animfleet_scheduler = scheduler
    return app


def run_webhooks(region: Region, settings: WebhookSettings, name: str | None = None) -> None:
    """Run ``region``'s webhooks process in the foreground (``animfleet webhooks``)."""
    logs.configure()
    if port := port_from_env("ANIMFLEET_WEBHOOK_METRICS_PORT"):
        serve(port)  # threads pool: one process, plain in-memory metrics
    app = create_app(region, settings, NetGuard.from_env())
    node = name or f"webhooks-{region.name}-{os.getpid()}@{socket.gethostname()}"
    log.info(
        "webhooks.start",
        region=region.name,
        signing_keys=len(settings.secrets),
        schedule_s=list(settings.schedule_s),
    )
    argv: list[Any] = [
        "worker",
        "--pool=threads",
        f"--concurrency={settings.concurrency}",
        f"--queues={queue_name(region)}",
        f"--hostname={node}",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
    ]
    app.worker_main(argv)
