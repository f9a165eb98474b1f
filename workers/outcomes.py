"""Which model version runs a job, and how its outcome counts against that version (canaries)."""

from __future__ import annotations

import redis
import structlog

from animfleet.jobs import JobRecord, JobState
from animfleet.region.canary import VersionRuns, judge
from animfleet.region.deployments import Deployments
from animfleet.versions import is_pinned, sticky_fraction
from workers import metrics as worker_metrics
from workers.served_versions import ModelShelf

UNNAMED_MODEL = "worker@local"  # a runner built without a shelf (in-process tests)

# Failures that count against the version that ran the job (a canary that fails these is
# rolled back); bad input, cancels, deadlines and storage trouble do not.
VERSION_FAILURES = frozenset(
    {"model_error", "model_unavailable", "internal_error", "timeout", "worker_lost"}
)


def version_to_run(
    client: redis.Redis,
    region: str,
    shelf: ModelShelf | None,
    bound: structlog.stdlib.BoundLogger,
    record: JobRecord,
) -> str:
    """The version to run: the one picked at submit, unless its deployment has rolled it
    back since (then the deployment picks again); the worker's own model when none."""
    picked, model = record.params.model_version, record.params.model
    if picked is None:
        return shelf.own_label if shelf else UNNAMED_MODEL
    if model is None or is_pinned(model):
        return picked
    deployment = Deployments(client, region).get(model)
    if deployment is None or deployment.versions.get(picked, 0.0) > 0:
        return picked
    repicked = deployment.pick(sticky_fraction(record.id))
    if repicked != picked:
        bound.info("job.version_repicked", deployment=model, was=picked, now=repicked)
    return repicked


def observe_outcome(
    client: redis.Redis, region: str, bound: structlog.stdlib.BoundLogger, record: JobRecord
) -> None:
    """Count the outcome against the version that ran the job, then let its deployment
    judge its canaries (a rollback is logged and counted here, where it happened)."""
    version = record.params.model_version
    failed = record.error is not None and record.error.code in VERSION_FAILURES
    if version is None or not (record.status is JobState.SUCCEEDED or failed):
        return
    seconds = (record.completed_at or 0.0) - (record.started_at or record.completed_at or 0.0)
    worker_metrics.VERSION_OUTCOMES.labels(
        region, version, "failed" if failed else "succeeded"
    ).inc()
    try:
        VersionRuns(client, region).record(version, record.id, not failed, seconds)
        model = record.params.model
        if model is None or is_pinned(model):
            return
        for event in judge(client, region, model):
            worker_metrics.ROLLBACKS.labels(region, model, str(event.version)).inc()
            bound.warning(
                "deployment.rolled_back",
                deployment=model,
                version=event.version,
                reason=event.reason,
                failed_jobs=event.failed_jobs,
            )
    except redis.RedisError as error:  # the job's own outcome is recorded already
        bound.warning("deployment.outcome_unrecorded", version=version, error=str(error))
