"""The GPU worker's Celery app: one job per GPU, nothing lost when a worker dies.

``app`` is built at import, so ``celery -A workers.celery_app worker`` works as well as
``animfleet worker``; its broker and queue come from the region (``ANIMFLEET_REGION`` and the
fleet file), read when Celery first needs its configuration.

Settings that make "one job per GPU" true (see celery #4537 and kombu #337):
``-c 1`` + ``worker_prefetch_multiplier=1`` + ``task_acks_late``: the worker holds exactly the
one message it runs. ``task_reject_on_worker_lost``: if the process running the job dies, the
message goes back to the queue; the job record counts deliveries and fails the job after
``max_deliveries``, so a poison job cannot loop forever. The Redis ``visibility_timeout`` is
above the hard time limit, so a slow job is never handed to a second worker while it runs.

Batch mode (``ANIMFLEET_WORKER_BATCH=N``, ``animfleet worker --batch N``): a thread pool of N
with prefetch 1 holds at most N messages; each task thread runs its job's I/O in one of N slots
and hands the denoising to one shared engine (``workers/batching``). The model loads in the
main process; the sweeper, not a lost pool child, recovers the jobs of a worker that dies.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import structlog
from celery import Celery, signals
from celery.exceptions import Reject
from structlog.contextvars import bound_contextvars

from animfleet import logs
from animfleet.constants import ANIMATE_TASK
from animfleet.region.affinity import direct_queue
from animfleet.region.broker import (
    BrokerUnavailable,
    celery_broker_config,
    has_direct_queues,
    is_amqp,
    region_queue,
)
from animfleet.region.joblogs import keep_job_logs
from animfleet.region.jobstore import JobStore
from animfleet.region.store_client import store_client
from animfleet.region.workers import WorkerRegistry, slot_names
from animfleet.topology import Region, Topology
from workers.boot_clock import CLOCK
from workers.redelivery import defer_in_store, hand_back
from workers.settings import WorkerSettings

if TYPE_CHECKING:
    from workers.batching.slots import Slots
    from workers.runner import JobRunner

REGION_ENV = "ANIMFLEET_REGION"
log = structlog.stdlib.get_logger("animfleet.worker")

# Settings that hold whatever the region: JSON only (never pickle), no results.
BASE_CONFIG: dict[str, Any] = {
    "task_serializer": "json",
    "accept_content": ["json"],
    "result_serializer": "json",
    "task_ignore_result": True,
    "worker_hijack_root_logger": False,
}


class WorkerState(StrEnum):
    """Where a worker process is in its life; only IDLE takes a job."""

    STARTING = "starting"  # before its model is loaded
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"  # shutting down: left the capacity count, finishing its job
    STOPPED = "stopped"


@dataclass
class WorkerProcess:
    """This pool process's worker: what it serves and, once loaded, its job runner."""

    region: Region | None = None
    settings: WorkerSettings | None = None
    runner: JobRunner | None = None
    state: WorkerState = WorkerState.STARTING
    slots: Slots | None = None  # batch mode: one runner per job slot

    def context(self) -> tuple[Region, WorkerSettings]:
        """The region and settings, from :func:`configure` or else the environment."""
        if self.region is None or self.settings is None:
            name = os.environ.get(REGION_ENV)
            if not name:
                raise RuntimeError(f"set {REGION_ENV} to the region this worker serves")
            self.region = Topology.load().region(name)
            self.settings = WorkerSettings.from_env()
        if self.settings.name is None:  # named once, in the main process, before any fork
            name = f"{socket.gethostname()}-{os.getpid()}"
            self.settings = self.settings.model_copy(update={"name": name})
        return self.region, self.settings


process = WorkerProcess()


def direct_queues(region: Region, settings: WorkerSettings) -> list[str]:
    """The worker's own queue (see :mod:`animfleet.region.affinity`), once it has a name; a
    batch worker's slots have one each; none on RabbitMQ (see
    :func:`animfleet.region.broker.has_direct_queues`)."""
    if not settings.name or not has_direct_queues(region.broker_url):
        return []
    return [direct_queue(region, member) for member in slot_names(settings.name, settings.batch)]


def celery_config(region: Region, settings: WorkerSettings) -> dict[str, Any]:
    return {
        **BASE_CONFIG,
        "broker_url": region.broker_url,
        "broker_connection_retry_on_startup": True,
        # RabbitMQ: confirms and per-consumer prefetch; a message whose worker's connection
        # dies is returned at once (no visibility timeout), and the worker's direct queue is
        # consumed beside the shared one rather than strictly before it.
        **celery_broker_config(
            region.broker_url,
            {
                "visibility_timeout": settings.visibility_timeout_s,
                # Surviving workers sweep for messages whose worker host died: at least twenty
                # times per visibility timeout rather than kombu's default of every ~100 s.
                "unacked_restore_interval": max(1, settings.visibility_timeout_s // 20),
                "unacked_restore_throttle": 1,
                # Queues in the order given, not in turn: a job placed on this worker's direct
                # queue (it holds what the job needs warm) starts before the shared queue's next.
                "queue_order_strategy": "priority",
            },
        ),
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_time_limit": settings.hard_time_limit_s,
        "task_soft_time_limit": settings.soft_time_limit_s,
        # Its own direct queue first (jobs placed on it for what it holds warm), then the
        # region's shared one.
        # On RabbitMQ quorum queues, and no direct ones (see direct_queues).
        "task_queues": [
            *(region_queue(region, q) for q in direct_queues(region, settings)),
            region_queue(region, region.queue),
        ],
        "task_default_queue": region.queue,
        "worker_prefetch_multiplier": 1,
        # The pool child loads (and compiles) the model before it reports up; Celery's default
        # of 4 s would kill it mid-load and fork another, forever.
        "worker_proc_alive_timeout": settings.model_load_timeout_s,
        "worker_concurrency": settings.batch,
        # A broker blip must not throw the running job's GPU work away: the job keeps running
        # (its record updates retry for 30 s), finishes and records its result; if its ack is
        # lost with the connection, the redelivered message finds the record terminal.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_send_task_events": True,
    }


def _lazy_config() -> dict[str, Any]:
    """The full configuration once a region is known; only the base one (enough for
    ``celery -A workers.celery_app worker --help``) before."""
    if process.region is None and not os.environ.get(REGION_ENV):
        return dict(BASE_CONFIG)
    return celery_config(*process.context())


app = Celery("animfleet-worker")
app.add_defaults(_lazy_config)


def configure(region: Region, settings: WorkerSettings) -> Celery:
    """Serve ``region`` with ``settings`` (instead of reading them from the environment)."""
    process.region, process.settings = region, settings
    app.conf.update(celery_config(region, settings))
    return app


# A delivery of a job whose run is alive (its lease is live) is sent again later rather than
# acked away: if that run dies, the deferred delivery takes the job over once its lease lapses.
# Bounded: past this many deferrals the live run has held the job for minutes; the sweeper
# requeues it if that run dies later.
MAX_DEFERRALS = 20
MAX_DEFER_S = 60.0


@app.task(name=ANIMATE_TASK, bind=True)  # type: ignore[untyped-decorator]
def animate(self: Any, job_id: str) -> None:
    from animfleet.region.runs import LeaseHeld

    deferrals = int(self.request.retries)
    try:
        if process.slots is not None:
            with process.slots.take() as slot:
                _animate(slot, job_id, deferrals)
            return
        if process.runner is None:
            raise RuntimeError("worker process has no model loaded")
        _animate(process.runner, job_id, deferrals)
    except LeaseHeld as held:
        if deferrals >= MAX_DEFERRALS:
            log.info("job.duplicate_delivery", job_id=job_id, running_on=held.worker)
            return
        # First when the live lease would lapse (a dead run's job is taken over at once),
        # then backing off: a live run renews its lease until it ends.
        countdown = min(held.remaining_s + 2.0**deferrals - 1.0, MAX_DEFER_S)
        log.info(
            "job.delivery_deferred",
            job_id=job_id,
            running_on=held.worker,
            countdown_s=round(countdown, 2),
            deferrals=deferrals + 1,
        )
        region = process.context()[0]
        if is_amqp(region.broker_url):
            # Quorum queues hold no ETA messages: the delivery waits in the store's outbox.
            assert process.runner is not None
            defer_in_store(process.runner.store, region, job_id, deferrals + 1, countdown)
            return
        raise self.retry(countdown=countdown, max_retries=MAX_DEFERRALS) from None


def _animate(runner: JobRunner, job_id: str, deferrals: int) -> None:
    # Every line logged while the job runs (pipeline, storage, libraries) names it.
    context = bound_contextvars(job_id=job_id, region=runner.region.name, worker=runner.worker_name)
    if process.state is WorkerState.IDLE:
        process.state = WorkerState.BUSY
    try:
        with context:
            runner.run(job_id)
    except redis.RedisError as error:
        # The job store stayed unreachable past its retries, so the record may still say
        # running: acking would strand the job. Back to the queue; the next delivery
        # finds the record as it is (skips a finished job, runs a running one again).
        # On RabbitMQ a reject counts toward the delivery limit: a fresh copy does not.
        if is_amqp(runner.region.broker_url):
            with contextlib.suppress(BrokerUnavailable):
                hand_back(runner.region, job_id, deferrals, f"job store unreachable: {error}")
                return
        raise Reject(f"job store unreachable: {error}", requeue=True) from error
    finally:
        if process.state is WorkerState.BUSY:
            process.state = WorkerState.IDLE


def load_model(**_: Any) -> None:
    """Load the model once per worker process, before it takes its first job."""
    from animfleet.region.affinity import DirectQueues
    from animfleet.region.served_addons import RegionAddons
    from animfleet.shipped_models import resolve_model
    from storage import StorageError, open_store
    from workers.heartbeat import Heartbeat
    from workers.model import Animator
    from workers.model.animator import load_animator
    from workers.model.runtime.boot_tune import SharedProfiles
    from workers.prefetch import PrefetchListener, held_things
    from workers.runner import JobRunner
    from workers.served_versions import (
        ModelShelf,
        VersionUnavailable,
        boot_versions,
        fetch_version,
        own_version,
    )

    logs.configure()
    region, settings = process.context()
    if settings.batch > 1:  # compiled graphs are traced for one video: serve eagerly
        settings = settings.model_copy(update={"compile": False})
    objects = open_store(region.storage)
    # A device kind the profile lacks is measured once per region: peers read the entry.
    shared = SharedProfiles(objects)
    loading = time.monotonic()
    animator = load_animator(settings, shared)  # compiles and warms up if configured
    worker_name = settings.name or f"{socket.gethostname()}-{os.getpid()}"
    store = JobStore.from_url(region.store, retry_s=settings.store_retry_s)
    keep_job_logs({region.name: store.redis})

    def load_version(ref: str) -> Animator:
        try:
            path = fetch_version(ref, region, store.redis, objects, settings.model_cache)
        except StorageError as error:  # unreachable, or files that do not match their hash
            raise VersionUnavailable(f"{ref}: {error}") from error
        return load_animator(settings.model_copy(update={"model_dir": path}), shared)

    label = own_version(resolve_model(settings.model_dir), animator.variant.name)
    shelf = ModelShelf(animator, label, load_version, settings.max_models)
    warmup_s = animator.warmup_time_s
    for ref in boot_versions(settings):
        warmup_s += shelf.get(ref)[1].warmup_time_s
    load_s = time.monotonic() - loading - warmup_s
    addons = getattr(animator, "addons", None)  # stand-in animators have none
    heartbeat = Heartbeat(
        store.redis,
        region.name,
        worker_name,
        ",".join(shelf.versions),
        holdings=lambda: held_things(animator),
        direct=DirectQueues(store.redis, region) if direct_queues(region, settings) else None,
        slots=settings.batch,
        # A thread pool enforces no time limit: a run still held past it is a hung slot.
        hard_limit_s=settings.hard_time_limit_s,
    )
    if addons is not None:  # dispatchers accept jobs asking for these from now on
        RegionAddons(store.redis, region.name).advertise(
            addons.names(), with_image=addons.with_image()
        )
        for member, slot in zip(heartbeat.members, heartbeat.slots, strict=True):
            PrefetchListener(store.redis, region.name, member, addons, slot).start()
    process.runner = JobRunner(
        region=region,
        settings=settings,
        store=store,
        objects=objects,
        animator=animator,
        worker_name=worker_name,
        heartbeat=heartbeat,
        shelf=shelf,
    )
    if settings.batch > 1:
        from workers.batching.slots import Slots

        process.slots = Slots(process.runner, settings.batch)
    heartbeat.start()
    process.state = WorkerState.IDLE
    if settings.metrics_port is not None:
        from workers import metrics

        metrics.MODEL_LOAD.labels(region.name).set(animator.load_time_s)
        metrics.MODEL_WARMUP.labels(region.name).set(animator.warmup_time_s)
    CLOCK.report(region.name, load_s, warmup_s, metrics=settings.metrics_port is not None)
    log.info(
        "worker.model_loaded",
        region=region.name,
        worker=worker_name,
        load_time_s=round(animator.load_time_s, 3),
        warmup_time_s=round(animator.warmup_time_s, 3),
        batch=settings.batch,
        **animator.info,
    )


def load_model_in_main(**_: Any) -> None:
    """Batch mode: a thread pool has no child process, so the main one loads the model."""
    if process.context()[1].batch > 1:
        load_model()


def leave_fleet_from_main(**_: Any) -> None:
    if process.context()[1].batch > 1:
        leave_fleet()


def leave_fleet(**_: Any) -> None:
    """A warm shutdown takes the worker out of capacity now, not after its heartbeat lapses."""
    process.state = WorkerState.STOPPED
    if process.runner is not None and process.runner.heartbeat is not None:
        process.runner.heartbeat.stop()


def drain(**_: Any) -> None:
    """In the main process, on SIGTERM: leave the capacity count now, so no dispatcher admits to
    this worker while it finishes its job (its heartbeats no longer count it)."""
    region, settings = process.context()
    assert settings.name is not None
    try:
        registry = WorkerRegistry(store_client(region.store), region.name)
        registry.drain(settings.name, for_s=settings.visibility_timeout_s, slots=settings.batch)
    except redis.RedisError as error:  # the heartbeat lapses instead, within its TTL
        log.warning("worker.drain_unrecorded", worker=settings.name, error=str(error))
        return
    log.info("worker.draining", worker=settings.name, region=region.name)


def guard_memory(**_: Any) -> None:
    """In the main process: serve /metrics, watch the pool child's memory
    (see workers/memguard.py)."""
    settings = process.context()[1]
    if settings.metrics_port is not None:
        from animfleet.metrics import serve

        serve(settings.metrics_port)
    if settings.max_rss_mb is not None:
        from workers.memguard import MemoryGuard

        MemoryGuard(settings.max_rss_mb, worker=settings.name or "").start()


def use_our_logging(**_: Any) -> None:
    logs.configure()


signals.worker_process_init.connect(load_model, weak=False)
signals.worker_process_shutdown.connect(leave_fleet, weak=False)
signals.worker_init.connect(load_model_in_main, weak=False)
signals.worker_shutdown.connect(leave_fleet_from_main, weak=False)
signals.worker_ready.connect(guard_memory, weak=False)
signals.worker_shutting_down.connect(drain, weak=False)
signals.setup_logging.connect(use_our_logging, weak=False)


def fetch_boot_versions(region: Region, settings: WorkerSettings) -> list[Path]:
    """Fetch and verify the versions the worker loads at boot into its disk cache, before
    Celery starts: a version whose files do not match their hash stops the worker here, with
    :class:`storage.registry.ModelIntegrityError` (or :class:`VersionUnavailable`)."""
    from storage import open_store
    from workers.served_versions import boot_versions, fetch_boot

    refs = boot_versions(settings)
    if not refs:
        return []
    client = store_client(region.store)
    objects = open_store(region.storage)
    paths = fetch_boot(refs, region, client, objects, settings.model_cache)
    log.info("worker.versions_verified", versions=refs, cache=str(settings.model_cache))
    return paths


def run_worker(region: Region, settings: WorkerSettings, name: str | None = None) -> None:
    """Start a GPU worker in the foreground (``animfleet worker``); raises before starting if
    a boot version is missing or does not match its hash."""
    fetch_boot_versions(region, settings)
    if settings.metrics_port is not None:
        from animfleet.metrics import use_multiprocess_dir

        use_multiprocess_dir()  # before any metric exists, in this process or a child
    node = name or f"gpu-{region.name}-{os.getpid()}@{socket.gethostname()}"
    # The heartbeat's name: ANIMFLEET_WORKER_NAME when set, else the Celery node name.
    named = settings if settings.name else settings.model_copy(update={"name": node})
    configure(region, named)
    app.worker_main(
        [
            "worker",
            "--pool=prefork" if settings.batch == 1 else "--pool=threads",
            f"--concurrency={settings.batch}",
            f"--queues={','.join([*direct_queues(region, named), region.queue])}",
            f"--hostname={node}",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=INFO",
        ]
    )
