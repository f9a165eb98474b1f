"""The model versions one worker serves: its own model, and registry versions on demand.

A worker serves every version of its region: the job's record names the version
(``params.model_version``, picked by the dispatcher); a job that names none runs the worker's
own model. Versions listed in ``ANIMFLEET_WORKER_MODELS`` are fetched and verified before the
worker joins the fleet (a version whose files do not match their hash stops the boot); any
other is fetched from the region's registry on first use. Loaded versions stay in memory, the
least recently used dropped past ``max_models``; their files stay in the disk cache.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import redis
import structlog

from animfleet.region.catalog import ModelCatalog
from animfleet.topology import Region
from storage import ObjectStore
from storage.registry import ModelRegistry, content_hash, directory_files
from workers.boot_clock import CLOCK
from workers.model import Animator, ModelError
from workers.settings import WorkerSettings

log = structlog.stdlib.get_logger("animfleet.worker")


class VersionUnavailable(ModelError):
    """The version is not in the region's registry, or its files could not be fetched."""


def boot_versions(settings: WorkerSettings) -> list[str]:
    """The versions to fetch and load before taking jobs (``ANIMFLEET_WORKER_MODELS``)."""
    return [ref.strip() for ref in settings.models.split(",") if ref.strip()]


def own_version(model_dir: Path, name: str) -> str:
    """How jobs name the worker's own model: its directory's name and content hash."""
    if not model_dir.is_dir():
        return f"{name}@local"
    return f"{model_dir.name}@sha256-{content_hash(directory_files(model_dir))[:12]}"


def fetch_version(
    ref: str, region: Region, client: redis.Redis, objects: ObjectStore, cache: Path
) -> Path:
    """``ref``'s files, verified against the hash the region's catalog holds for it.

    Raises :class:`VersionUnavailable` when the region has no such version;
    :class:`storage.registry.ModelIntegrityError` when its files do not match their hash."""
    return _fetch(ref, region, client, objects, cache)[0]


# Boot versions the main process fetched and verified: its forked pool child loads them from
# there without hashing every file of a multi-GB directory a second time.
_VERIFIED_AT_BOOT: dict[tuple[str, str], Path] = {}


def fetch_boot(
    refs: list[str], region: Region, client: redis.Redis, objects: ObjectStore, cache: Path
) -> list[Path]:
    """:func:`fetch_version` of each boot version, timed into the boot clock (``fetch``)."""
    started = time.monotonic()
    paths = []
    for ref in refs:
        path, registry = _fetch(ref, region, client, objects, cache)
        manifest_hash = path.name  # the cache directory is named by it
        _VERIFIED_AT_BOOT[(ref, manifest_hash)] = path
        if registry.last_fetch is not None:
            CLOCK.fetched_bytes += registry.last_fetch.downloaded
            CLOCK.reused_bytes += registry.last_fetch.reused
        paths.append(path)
    CLOCK.fetch_s += time.monotonic() - started
    return paths


def _fetch(
    ref: str, region: Region, client: redis.Redis, objects: ObjectStore, cache: Path
) -> tuple[Path, ModelRegistry]:
    entry = ModelCatalog(client, region.name).get(ref)
    if entry is None:
        raise VersionUnavailable(f"region {region.name}'s registry has no version {ref!r}")
    registry = ModelRegistry(objects, region.storage.prefix)
    verified = _VERIFIED_AT_BOOT.get((ref, entry.hash))
    if verified is not None and verified.is_dir():
        return verified, registry
    return registry.fetch(ref, cache, expected_hash=entry.hash), registry


class ModelShelf:
    """Animators by version: the worker's own, and up to ``capacity`` registry versions."""

    def __init__(
        self,
        own: Animator,
        own_label: str,
        load: Callable[[str], Animator],
        capacity: int,
    ) -> None:
        self.own, self.own_label = own, own_label
        self._load, self.capacity = load, capacity
        self._loaded: OrderedDict[str, Animator] = OrderedDict()

    def get(self, version: str | None) -> tuple[str, Animator]:
        """(version, animator) for a job asking for ``version`` (``None``: the worker's own).

        Raises :class:`workers.model.ModelError` when the version cannot be loaded."""
        if version is None or version == self.own_label:
            return self.own_label, self.own
        if version in self._loaded:
            self._loaded.move_to_end(version)
            return version, self._loaded[version]
        animator = self._load(version)
        self._loaded[version] = animator
        while len(self._loaded) > self.capacity:
            dropped, _ = self._loaded.popitem(last=False)
            log.info("model.version_unloaded", version=dropped)
        log.info("model.version_loaded", version=version, load_time_s=animator.load_time_s)
        return version, animator

    @property
    def versions(self) -> list[str]:
        return [self.own_label, *self._loaded]
