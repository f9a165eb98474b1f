"""Which model version a job runs: the dispatcher's pick from its region's deployments.

A job names a deployment (``model="rollout"``; ``default`` when it names nothing and the region
has one) or pins a version (``model="animfleet-small-distilled@3"``). The pick is sticky: the
same idempotency key (or client-chosen id) always lands on the same version while the weights
stand, so a retried submit gets what the first one got. Deployments and the catalog are read
from the region's Redis and kept for ``ttl_s``: a rollback reaches new submits within that,
and a worker re-picks a rolled-back version's queued job when it starts it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import redis

from animfleet.families import Adjustment, FamilySpec
from animfleet.region.catalog import CatalogEntry, ModelCatalog
from animfleet.region.deployments import Deployment, Deployments
from animfleet.versions import DEFAULT_DEPLOYMENT, is_pinned, sticky_fraction
from dispatcher.inputs import InvalidInput


@dataclass(frozen=True)
class Choice:
    """What decided (``model``: a deployment or a pinned ref; ``None``: the worker's own model)
    and the version picked (``None`` with it); for a version of an image-to-video family, its
    rules and what they changed in the job (:mod:`dispatcher.family_fit`)."""

    model: str | None
    version: str | None
    family: FamilySpec | None = None
    adjustments: tuple[Adjustment, ...] = ()


WORKER_MODEL = Choice(None, None)  # no deployment: the worker serves its own model


@dataclass(frozen=True)
class _Snapshot:
    at: float
    deployments: dict[str, Deployment]
    versions: frozenset[str]
    families: dict[str, FamilySpec]  # by version, for those of an image-to-video family

    def knows(self, name: str | None) -> bool:
        return name is None or name in self.versions or name in self.deployments


class VersionChooser:
    """Picks versions for jobs of any region, from a short-lived copy of its deployments."""

    def __init__(self, redis_of: Callable[[str], redis.Redis], ttl_s: float = 1.0) -> None:
        self.redis_of, self.ttl_s = redis_of, ttl_s
        self._snapshots: dict[str, _Snapshot] = {}
        self._lock = threading.Lock()

    def _snapshot(self, region: str, knows: str | None = None) -> _Snapshot:
        """The region's deployments and versions, at most ``ttl_s`` old; read afresh when the
        copy held lacks ``knows`` (a version or deployment just pushed is usable at once, and
        only a refusal pays the extra read)."""
        with self._lock:
            held = self._snapshots.get(region)
        if held is not None and time.monotonic() - held.at < self.ttl_s and held.knows(knows):
            return held
        client = self.redis_of(region)
        entries = ModelCatalog(client, region).entries()
        fresh = _Snapshot(
            time.monotonic(),
            Deployments(client, region).all(),
            frozenset(entry.ref for entry in entries),
            {entry.ref: entry.family for entry in entries if entry.family is not None},
        )
        with self._lock:
            self._snapshots[region] = fresh
        return fresh

    def choose(self, region: str, model: str | None, sticky_key: str) -> Choice:
        """The version for a job of ``region``; raises :class:`InvalidInput` (field ``model``)
        for a deployment or version the region does not have."""
        snapshot = self._snapshot(region, model)
        if model is None:
            default = snapshot.deployments.get(DEFAULT_DEPLOYMENT)
            if default is None:
                return WORKER_MODEL
            return self._with_family(
                region, Choice(DEFAULT_DEPLOYMENT, default.pick(sticky_fraction(sticky_key)))
            )
        if is_pinned(model):
            if model not in snapshot.versions:
                known = ", ".join(sorted(snapshot.versions)) or "none"
                raise InvalidInput(
                    "model", f"region {region} has no version {model!r} (it has: {known})"
                )
            return self._with_family(region, Choice(model, model))
        deployment = snapshot.deployments.get(model)
        if deployment is None:
            known = ", ".join(sorted(snapshot.deployments)) or "none"
            raise InvalidInput(
                "model", f"region {region} has no deployment {model!r} (it has: {known})"
            )
        return self._with_family(
            region, Choice(model, deployment.pick(sticky_fraction(sticky_key)))
        )

    def listing(self, region: str) -> tuple[dict[str, Deployment], list[CatalogEntry]]:
        """``region``'s deployments and registry versions, read now (``GET /v1/models``)."""
        client = self.redis_of(region)
        return Deployments(client, region).all(), ModelCatalog(client, region).entries()

    def _with_family(self, region: str, choice: Choice) -> Choice:
        return replace(choice, family=self.family(region, choice.version))

    def family(self, region: str, version: str | None) -> FamilySpec | None:
        """The family rules ``version`` was pushed with in ``region`` (None: the built-in model,
        or the workers' own model)."""
        if version is None:
            return None
        return self._snapshot(region, version).families.get(version)

    def serves(self, region: str, version: str | None) -> bool:
        """Whether ``region`` can run ``version`` (any region runs its workers' own model)."""
        return version is None or version in self._snapshot(region, version).versions
