"""Deployments and canary rollback against a real Redis."""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError

from animfleet.region.canary import VersionRuns, WindowStats, judge, verdict
from animfleet.region.deployments import Deployment, Deployments, RollbackPolicy
from animfleet.versions import sticky_fraction

STABLE, CANARY = "anim@1", "anim@2"


def rollout(min_samples: int = 3, **policy: float) -> Deployment:
    return Deployment(
        name="rollout",
        versions={STABLE: 90.0, CANARY: 10.0},
        stable=STABLE,
        rollback=RollbackPolicy(min_samples=min_samples, **policy),  # type: ignore[arg-type]
    )


def test_pick_follows_the_weights_and_is_sticky() -> None:
    deployment = rollout()
    picks = [deployment.pick(sticky_fraction(f"key-{i}")) for i in range(4000)]
    share = picks.count(CANARY) / len(picks)
    assert 0.085 < share < 0.115  # 10 % within about 3.5 standard deviations
    assert [deployment.pick(sticky_fraction(f"key-{i}")) for i in range(50)] == picks[:50]
    no_traffic = deployment.model_copy(update={"versions": {STABLE: 0.0, CANARY: 0.0}})
    assert no_traffic.pick(0.5) == STABLE


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"versions": {}, "stable": STABLE}, "at least one version"),
        ({"versions": {STABLE: -1.0}, "stable": STABLE}, "must be >= 0"),
        ({"versions": {"no-at-sign": 1.0}, "stable": "no-at-sign"}, "name@version"),
        ({"versions": {STABLE: 1.0}, "stable": CANARY}, "not among"),
    ],
)
def test_bad_deployments_are_refused_with_the_reason(spec: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Deployment.model_validate({"name": "rollout", **spec})


def test_a_canary_failing_every_job_rolls_back_at_min_samples(redis_client: redis.Redis) -> None:
    deployments = Deployments(redis_client, "r1")
    deployments.put(rollout(min_samples=3))
    runs = VersionRuns(redis_client, "r1")
    for i in range(5):
        runs.record(STABLE, f"s{i}", True, 1.0)
    events = []
    for i in range(3):
        runs.record(CANARY, f"c{i}", False, 0.5)
        events += judge(redis_client, "r1", "rollout")
        assert bool(events) == (i == 2)  # judged only once it has min_samples outcomes
    (event,) = events
    assert (event.kind, event.version, event.failed_jobs) == (
        "rollback",
        CANARY,
        ["c0", "c1", "c2"],
    )
    assert "error rate 100%" in event.reason
    after = deployments.get("rollout")
    assert after is not None and after.versions[CANARY] == 0.0 and after.versions[STABLE] == 90.0
    assert judge(redis_client, "r1", "rollout") == []  # already rolled back: no second event
    kinds = [e.kind for e in deployments.events(deployment="rollout")]
    assert kinds == ["rollback", "set"]


def test_a_healthy_canary_stays(redis_client: redis.Redis) -> None:
    Deployments(redis_client, "r2").put(rollout(min_samples=3))
    runs = VersionRuns(redis_client, "r2")
    for i in range(10):
        runs.record(STABLE, f"s{i}", i != 0, 1.0)  # stable fails 10 %
        runs.record(CANARY, f"c{i}", i != 0, 1.1)
    assert judge(redis_client, "r2", "rollout") == []


def test_slow_canary_verdict_needs_samples_on_both_sides() -> None:
    deployment = rollout(min_samples=5, max_p95_ratio=1.5)
    slow = WindowStats(samples=5, failures=0, p95_s=3.0, successes=5, failed_jobs=())
    fast = WindowStats(samples=5, failures=0, p95_s=1.0, successes=5, failed_jobs=())
    few = WindowStats(samples=4, failures=0, p95_s=1.0, successes=4, failed_jobs=())
    assert verdict(deployment, slow, fast) is not None
    assert "3.00x" in str(verdict(deployment, slow, fast))
    assert verdict(deployment, slow, few) is None
    assert verdict(deployment, fast, fast) is None


def test_promote_makes_the_canary_stable(redis_client: redis.Redis) -> None:
    deployments = Deployments(redis_client, "r3")
    deployments.put(rollout())
    promoted = deployments.promote("rollout", CANARY)
    assert promoted.stable == CANARY and promoted.versions == {STABLE: 0.0, CANARY: 1.0}
    with pytest.raises(ValueError, match="not a version"):
        deployments.promote("rollout", "anim@9")
    with pytest.raises(KeyError):
        deployments.promote("absent", CANARY)
