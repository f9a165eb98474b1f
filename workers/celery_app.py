"""The GPU worker's Celery app: one job per GPU, nothing lost when a worker dies.

Settings that make "one job per GPU" true (see celery #4537 and kombu #337):
``-c 1`` + ``worker_prefetch_multiplier=1`` + ``task_acks_late``: the worker holds exactly the
one message it runs. ``task_reject_on_worker_lost``: if the process running the job dies, the
message goes back to the queue; the job record counts deliveries and fails the job after
``max_deliveries``, so a poison job cannot loop forever. The Redis ``visibility_timeout`` is
above the hard time limit, so a slow job is never handed to a second worker while it runs.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import redis
from celery import Celery, signals
from celery.exceptions import Reject
from kombu import Queue
from structlog.contextvars import bound_contextvars

from animfleet import logs
from animfleet.constants import ANIMATE_TASK
from animfleet.region.jobstore import JobStore
from animfleet.topology import Region
from workers.settings import WorkerSettings

_runner: Any = None  # the JobRunner of this worker process, built at process start


def celery_config(region: Region, settings: WorkerSettings) -> dict[str, Any]:
    return {
        "broker_url": region.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout_s,
            # Surviving workers sweep for messages whose worker host died: at least twenty
            # times per visibility timeout rather than kombu's default of every ~100 s.
            "unacked_restore_interval": max(1, settings.visibility_timeout_s // 20),
            "unacked_restore_throttle": 1,
        },
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_time_limit": settings.hard_time_limit_s,
        "task_soft_time_limit": settings.soft_time_limit_s,
        "task_queues": [Queue(region.queue)],
        "task_default_queue": region.queue,
        "worker_prefetch_multiplier": 1,
        # The pool child loads (and compiles) the model before it reports up; Celery's default
        # of 4 s would kill it mid-load and fork another, forever.
        "worker_proc_alive_timeout": settings.model_load_timeout_s,
        "worker_concurrency": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_hijack_root_logger": False,
        "worker_send_task_events": True,
    }


def create_app(region: Region, settings: WorkerSettings) -> Celery:
    """The Celery app of a GPU worker serving ``region``'s queue."""
    app = Celery(f"animfleet-worker-{region.name}")
    app.conf.update(celery_config(region, settings))

    @app.task(name=ANIMATE_TASK, bind=True)  # type: ignore[untyped-decorator]
    def animate(self: Any, job_id: str) -> None:
        del self
        if _runner is None:
            raise RuntimeError("worker process has no model loaded")
        # Every line logged while the job runs (pipeline, storage, libraries) names it.
        context = bound_contextvars(job_id=job_id, region=region.name, worker=_runner.worker_name)
        try:
            with context:
                _runner.run(job_id)
        except redis.RedisError as error:
            # The job store stayed unreachable past its retries, so the record may still say
            # running: acking would strand the job. Back to the queue; the next delivery
            # finds the record as it is (skips a finished job, runs a running one again).
            raise Reject(f"job store unreachable: {error}", requeue=True) from error

    def load_model(**_: Any) -> None:
        """Load the model once per worker process, before it takes its first job."""
        global _runner
        import structlog

        from storage import open_store
        from workers.heartbeat import Heartbeat
        from workers.model.animator import load_animator
        from workers.runner import JobRunner

        logs.configure()
        animator = load_animator(settings)  # compiles and warms up if configured
        worker_name = os.environ.get(
            "ANIMFLEET_WORKER_NAME", f"{socket.gethostname()}-{os.getpid()}"
        )
        store = JobStore.from_url(region.broker_url)
        heartbeat = Heartbeat(store.redis, region.name, worker_name, animator.variant.name)
        _runner = JobRunner(
            region=region,
            settings=settings,
            store=store,
            objects=open_store(region.storage),
            animator=animator,
            worker_name=worker_name,
            heartbeat=heartbeat,
        )
        heartbeat.start()
        if settings.metrics_port is not None:
            from workers import metrics

            metrics.MODEL_LOAD.labels(region.name).set(animator.load_time_s)
            metrics.MODEL_WARMUP.labels(region.name).set(animator.warmup_time_s)
        structlog.stdlib.get_logger("animfleet.worker").info(
            "worker.model_loaded",
            region=region.name,
            worker=worker_name,
            load_time_s=round(animator.load_time_s, 3),
            warmup_time_s=round(animator.warmup_time_s, 3),
            **animator.info,
        )

    def leave_fleet(**_: Any) -> None:
        """A warm shutdown takes the worker out of capacity now, not after its heartbeat lapses."""
        if _runner is not None and _runner.heartbeat is not None:
            _runner.heartbeat.stop()

    def guard_memory(**_: Any) -> None:
        """In the main process: serve /metrics, watch the pool child's memory
        (see workers/memguard.py)."""
        if settings.metrics_port is not None:
            from animfleet.metrics import serve

            serve(settings.metrics_port)
        if settings.max_rss_mb is not None:
            from workers.memguard import MemoryGuard

            name = os.environ.get("ANIMFLEET_WORKER_NAME", "")
            MemoryGuard(settings.max_rss_mb, worker=name).start()

    signals.worker_process_init.connect(load_model, weak=False)
    signals.worker_ready.connect(guard_memory, weak=False)
    signals.worker_process_shutdown.connect(leave_fleet, weak=False)
    signals.setup_logging.connect(lambda **_: logs.configure(), weak=False)
    return app


def run_worker(region: Region, settings: WorkerSettings, name: str | None = None) -> None:
    """Start a GPU worker in the foreground (``animfleet worker``)."""
    if settings.metrics_port is not None:
        from animfleet.metrics import use_multiprocess_dir

        use_multiprocess_dir()  # before any metric exists, in this process or a child
    app = create_app(region, settings)
    node = name or f"gpu-{region.name}-{os.getpid()}@{socket.gethostname()}"
    os.environ.setdefault("ANIMFLEET_WORKER_NAME", node)
    app.worker_main(
        [
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            f"--queues={region.queue}",
            f"--hostname={node}",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=INFO",
        ]
    )
