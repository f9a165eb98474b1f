"""Each version's recent outcomes, and the automatic rollback of a canary worse than stable.

Workers record every finished job's outcome under the version that ran it (ok or a model
failure, and its run time) in a sorted set by time. After each outcome, :func:`judge` compares
each canary of the job's deployment with its stable version over the policy's sliding window:
once the canary has ``min_samples`` outcomes, an error rate above stable's by more than
``max_error_rate_increase``, or (with enough successes on both sides) a p95 run time above
``max_p95_ratio`` times stable's, drops its weight to 0 in one optimistic transaction, so two
workers judging at once log one rollback. The event names the canary's failed jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from animfleet.region.deployments import Deployment, DeploymentEvent, Deployments
from animfleet.region.keys import VERSION_RUNS

KEEP_S = 24 * 3600  # outcomes older than this are dropped (longer than any window)
KEEP_RUNS = 5000  # and at most this many per version


@dataclass(frozen=True)
class Outcome:
    job_id: str
    ok: bool
    seconds: float
    at: float


@dataclass(frozen=True)
class WindowStats:
    """A version's outcomes within a window."""

    samples: int
    failures: int
    p95_s: float | None  # of the successful runs
    successes: int
    failed_jobs: tuple[str, ...]

    @property
    def error_rate(self) -> float:
        return self.failures / self.samples if self.samples else 0.0

    def summary(self) -> dict[str, float | int | None]:
        return {
            "samples": self.samples,
            "failures": self.failures,
            "error_rate": round(self.error_rate, 4),
            "p95_s": None if self.p95_s is None else round(self.p95_s, 4),
        }


class VersionRuns:
    """``version-runs:<region>:<version>``: outcome -> time, newest kept."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region

    def key(self, version: str) -> str:
        return f"{VERSION_RUNS}{self.region}:{version}"

    def record(self, version: str, job_id: str, ok: bool, seconds: float) -> None:
        now = time.time()
        key = self.key(version)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {f"{job_id}|{int(ok)}|{seconds:.4f}": now})
            pipe.zremrangebyscore(key, "-inf", now - KEEP_S)
            pipe.zremrangebyrank(key, 0, -KEEP_RUNS - 1)
            pipe.expire(key, KEEP_S)
            pipe.execute()

    def recent(self, version: str, window_s: float) -> list[Outcome]:
        raw: list[tuple[bytes, float]] = self.redis.zrangebyscore(  # type: ignore[assignment]
            self.key(version), time.time() - window_s, "+inf", withscores=True
        )
        outcomes = []
        for member, at in raw:
            job_id, ok, seconds = member.decode().rsplit("|", 2)
            outcomes.append(Outcome(job_id, ok == "1", float(seconds), float(at)))
        return outcomes

    def stats(self, version: str, window_s: float) -> WindowStats:
        outcomes = self.recent(version, window_s)
        times = sorted(o.seconds for o in outcomes if o.ok)
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))] if times else None
        failed = tuple(o.job_id for o in outcomes if not o.ok)
        return WindowStats(len(outcomes), len(failed), p95, len(times), failed)


def verdict(deployment: Deployment, canary: WindowStats, stable: WindowStats) -> str | None:
    """Why ``canary`` should be rolled back against ``stable`` under the policy, or ``None``."""
    policy = deployment.rollback
    if canary.samples < policy.min_samples:
        return None
    increase = canary.error_rate - stable.error_rate
    if increase > policy.max_error_rate_increase:
        return (
            f"error rate {canary.error_rate:.0%} over {canary.samples} jobs vs stable "
            f"{stable.error_rate:.0%} over {stable.samples} (allowed +"
            f"{policy.max_error_rate_increase:.0%})"
        )
    enough = min(canary.successes, stable.successes) >= policy.min_samples
    if enough and canary.p95_s and stable.p95_s:
        ratio = canary.p95_s / stable.p95_s
        if ratio > policy.max_p95_ratio:
            return (
                f"p95 run time {canary.p95_s:.3f}s vs stable {stable.p95_s:.3f}s "
                f"({ratio:.2f}x, allowed {policy.max_p95_ratio:.2f}x)"
            )
    return None


def judge(client: redis.Redis, region: str, name: str) -> list[DeploymentEvent]:
    """Roll back every canary of deployment ``name`` that the policy finds worse than stable;
    returns the rollback events logged (none when all is well or another judge was first)."""
    deployments = Deployments(client, region)
    deployment = deployments.get(name)
    if deployment is None:
        return []
    runs = VersionRuns(client, region)
    window = deployment.rollback.window_s
    stable = runs.stats(deployment.stable, window)
    events = []
    for version in deployment.canaries():
        canary = runs.stats(version, window)
        reason = verdict(deployment, canary, stable)
        if reason is None:
            continue
        rollback = DeploymentEvent(
            at=time.time(),
            deployment=name,
            kind="rollback",
            version=version,
            reason=reason,
            failed_jobs=list(canary.failed_jobs),
            stats={"canary": canary.summary(), "stable": stable.summary()},
        )
        event = deployments.change(name, _zero_weight(rollback))[1]
        if event is not None:
            events.append(event)
    return events


def _zero_weight(event: DeploymentEvent) -> Callable[[Deployment], DeploymentEvent | None]:
    """The edit that rolls ``event.version`` back, unless that happened (or it was promoted)
    since the verdict."""

    def edit(current: Deployment) -> DeploymentEvent | None:
        version = str(event.version)
        if not current.versions.get(version) or version == current.stable:
            return None
        current.versions[version] = 0.0
        return event

    return edit
