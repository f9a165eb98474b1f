"""The GPU worker's and webhook sender's Prometheus metrics (served by animfleet.metrics).

Worker metrics are written by the pool child that runs jobs, in prometheus-client's
multiprocess mode, so a child that dies mid-job keeps what it counted.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from animfleet.jobs import JobRecord
from animfleet.metrics import LATENCY_BUCKETS

JOBS_FINISHED = Counter(
    "animfleet_jobs_finished_total",
    "Jobs a worker ended, by terminal status and error code ('' when succeeded)",
    ["region", "status", "code"],
)
VERSION_OUTCOMES = Counter(
    "animfleet_model_version_jobs_total",
    "Jobs a worker ended, by the model version that ran them and outcome (succeeded|failed)",
    ["region", "version", "outcome"],
)
ROLLBACKS = Counter(
    "animfleet_canary_rollbacks_total",
    "Canary versions a worker's outcome report rolled back automatically, by deployment",
    ["region", "deployment", "version"],
)
QUEUE_TIME = Histogram(
    "animfleet_job_queue_seconds",
    "Seconds from submission to the start of the job's last delivery",
    ["region"],
    buckets=LATENCY_BUCKETS,
)
INFERENCE_TIME = Histogram(
    "animfleet_job_inference_seconds",
    "Seconds in the model for a succeeded job",
    ["region"],
    buckets=LATENCY_BUCKETS,
)
TOTAL_TIME = Histogram(
    "animfleet_job_total_seconds",
    "Seconds from submission to the terminal state (end-to-end latency)",
    ["region", "status"],
    buckets=LATENCY_BUCKETS,
)
REDELIVERIES = Counter(
    "animfleet_job_redeliveries_total",
    "Job starts after the first: the previous worker died or lost its broker",
    ["region"],
)
UPLOAD_RETRIES = Counter(
    "animfleet_upload_retries_total",
    "Output uploads retried after storage was unavailable",
    ["region"],
)
MODEL_LOAD = Gauge(
    "animfleet_model_load_seconds",
    "Seconds the worker took to load its model",
    ["region"],
    multiprocess_mode="max",
)
MODEL_WARMUP = Gauge(
    "animfleet_model_warmup_seconds",
    "Seconds the worker took to compile and warm up its model",
    ["region"],
    multiprocess_mode="max",
)
WORKER_BOOT = Gauge(
    "animfleet_worker_boot_seconds",
    "Seconds of the worker's boot by stage: fetch (boot versions from the bucket, verified), "
    "load, warmup, and ready (process start to taking jobs)",
    ["region", "stage"],
    multiprocess_mode="max",
)
UNET_CALLS = Counter(
    "animfleet_model_unet_calls_total",
    "U-Net calls of a worker whose model loaded AOT packages, by what ran them: aot (a static "
    "package), aot-dynamic (the package for any working size) or eager (none covers the shape)",
    ["path"],
)
MEMORY_GUARD_KILLS = Counter(
    "animfleet_memory_guard_kills_total", "Pool children killed past ANIMFLEET_WORKER_MAX_RSS_MB"
)
WEBHOOK_DELIVERIES = Counter(
    "animfleet_webhook_deliveries_total",
    "Webhook delivery attempts by outcome (delivered, retry, stopped, gave_up, refused)",
    ["region", "outcome"],
)


def job_started(record: JobRecord) -> None:
    if record.attempts > 1:
        REDELIVERIES.labels(record.region).inc()


def job_finished(record: JobRecord) -> None:
    """Count a job a worker moved to a terminal state, with its times."""
    code = record.error.code if record.error else ""
    JOBS_FINISHED.labels(record.region, record.status.value, code).inc()
    if record.metrics.queue_time is not None:
        QUEUE_TIME.labels(record.region).observe(record.metrics.queue_time)
    if record.metrics.inference_time is not None:
        INFERENCE_TIME.labels(record.region).observe(record.metrics.inference_time)
    if record.metrics.total_time is not None:
        TOTAL_TIME.labels(record.region, record.status.value).observe(record.metrics.total_time)
