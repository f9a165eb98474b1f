"""A region's deployments: named mixes of model versions, and the log of what changed them.

A deployment maps versions to weights (``stable`` 95, ``canary`` 5). The dispatcher picks one
version per job from the weights, sticky by the job's idempotency key; an automatic rollback
(:mod:`.canary`) sets a version's weight to 0; promotion is an explicit operator command.
Every change is appended to the region's deployment events, which ``animfleet deploy status``
shows, so an operator can see who or what moved traffic, and why.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import redis
from pydantic import BaseModel, Field, field_validator, model_validator

from animfleet.region.keys import DEPLOY_EVENTS, DEPLOYMENTS
from animfleet.versions import DEPLOYMENT_NAME, VERSION_REF

MAX_EVENTS = 1000


class RollbackPolicy(BaseModel):
    """When a canary counts as worse than stable, judged over its recent jobs."""

    window_s: float = Field(default=600.0, gt=0)  # the sliding window of outcomes
    # A canary is judged once it has this many finished jobs in the window: a canary that
    # fails every job is rolled back at its min_samples-th failure at the latest.
    min_samples: int = Field(default=20, ge=1)
    max_error_rate_increase: float = Field(default=0.05, ge=0, le=1)  # canary minus stable
    max_p95_ratio: float = Field(default=1.5, ge=1)  # canary p95 / stable p95 (both sampled)


class Deployment(BaseModel):
    """Weighted versions; ``stable`` serves whatever the weights leave (all 0: stable)."""

    name: str
    versions: dict[str, float]
    stable: str
    rollback: RollbackPolicy = Field(default_factory=RollbackPolicy)
    updated_at: float = 0.0

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not DEPLOYMENT_NAME.match(value):
            raise ValueError(f"a deployment name is lowercase letters, digits, . _ -: {value!r}")
        return value

    @field_validator("versions")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("a deployment needs at least one version")
        for ref, weight in value.items():
            if not VERSION_REF.match(ref):
                raise ValueError(f"versions are name@version, got {ref!r}")
            if not (weight >= 0 and math.isfinite(weight)):
                raise ValueError(f"weight of {ref} must be >= 0, got {weight}")
        return value

    @model_validator(mode="after")
    def _stable_is_listed(self) -> Deployment:
        if self.stable not in self.versions:
            raise ValueError(f"stable version {self.stable!r} is not among {sorted(self.versions)}")
        return self

    def pick(self, fraction: float) -> str:
        """The version for a job whose sticky number is ``fraction`` (in [0, 1))."""
        total = sum(self.versions.values())
        if total <= 0:
            return self.stable
        point, seen = fraction * total, 0.0
        for ref in sorted(self.versions):  # a fixed order: a key keeps its version
            seen += self.versions[ref]
            if point < seen:
                return ref
        return self.stable

    def canaries(self) -> list[str]:
        """The versions other than stable that take traffic now."""
        weights = sorted(self.versions.items())
        return [ref for ref, weight in weights if ref != self.stable and weight > 0]


class DeploymentEvent(BaseModel):
    """One change to a deployment: set, rollback or promote."""

    at: float
    deployment: str
    kind: str  # set | rollback | promote
    version: str | None = None
    reason: str = ""
    failed_jobs: list[str] = Field(default_factory=list)
    stats: dict[str, Any] = Field(default_factory=dict)


class Deployments:
    """``deployments:<region>`` (name -> JSON) and ``deploy-events:<region>``."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.key, self.events_key = DEPLOYMENTS + region, DEPLOY_EVENTS + region

    def get(self, name: str) -> Deployment | None:
        raw = self.redis.hget(self.key, name)
        return Deployment.model_validate_json(raw) if isinstance(raw, bytes) else None

    def all(self) -> dict[str, Deployment]:
        raw: dict[bytes, bytes] = self.redis.hgetall(self.key)  # type: ignore[assignment]
        return {k.decode(): Deployment.model_validate_json(v) for k, v in sorted(raw.items())}

    def put(self, deployment: Deployment, reason: str = "set by an operator") -> Deployment:
        """Create or replace ``deployment`` (weights as given) and log it."""
        deployment = deployment.model_copy(update={"updated_at": time.time()})
        event = DeploymentEvent(
            at=deployment.updated_at,
            deployment=deployment.name,
            kind="set",
            reason=reason,
            stats={"versions": deployment.versions, "stable": deployment.stable},
        )
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.key, deployment.name, deployment.model_dump_json())
            self._log(pipe, event)
            pipe.execute()
        return deployment

    def delete(self, name: str) -> bool:
        return bool(self.redis.hdel(self.key, name))

    def change(
        self, name: str, edit: Callable[[Deployment], DeploymentEvent | None]
    ) -> tuple[Deployment, DeploymentEvent | None]:
        """Apply ``edit`` to deployment ``name`` atomically (optimistic, retried on a race);
        ``edit`` returns the event to log, or ``None`` to leave the deployment as it was.
        Raises KeyError if there is no such deployment."""
        outcome: list[tuple[Deployment, DeploymentEvent | None]] = []

        def apply(pipe: redis.client.Pipeline) -> None:
            outcome.clear()
            raw = pipe.hget(self.key, name)
            if not isinstance(raw, bytes):
                raise KeyError(name)
            deployment = Deployment.model_validate_json(raw)
            event = edit(deployment)
            outcome.append((deployment, event))
            if event is None:
                return
            deployment.updated_at = event.at
            pipe.multi()
            pipe.hset(self.key, name, deployment.model_dump_json())
            self._log(pipe, event)

        self.redis.transaction(apply, self.key)
        return outcome[0]

    def promote(self, name: str, version: str) -> Deployment:
        """Make ``version`` (one of the deployment's) stable with all of the traffic."""

        def edit(deployment: Deployment) -> DeploymentEvent:
            if version not in deployment.versions:
                raise ValueError(f"{version} is not a version of deployment {name}")
            before = dict(deployment.versions)
            deployment.versions = {ref: 0.0 for ref in deployment.versions} | {version: 1.0}
            deployment.stable = version
            return DeploymentEvent(
                at=time.time(),
                deployment=name,
                kind="promote",
                version=version,
                reason="promoted by an operator",
                stats={"before": before},
            )

        return self.change(name, edit)[0]

    def events(self, limit: int = 50, deployment: str | None = None) -> list[DeploymentEvent]:
        """The newest events first (of one deployment when named)."""
        raw: list[bytes] = self.redis.lrange(self.events_key, 0, MAX_EVENTS - 1)  # type: ignore[assignment]
        events = [DeploymentEvent.model_validate(json.loads(item)) for item in raw]
        if deployment is not None:
            events = [event for event in events if event.deployment == deployment]
        return events[:limit]

    def _log(self, pipe: Any, event: DeploymentEvent) -> None:
        pipe.lpush(self.events_key, event.model_dump_json())
        pipe.ltrim(self.events_key, 0, MAX_EVENTS - 1)
