"""The model versions a region serves: its registry's index, read by dispatchers and workers.

The files of a version live in the region's bucket (``storage.registry``), under their content
hash; ``animfleet model push`` writes them there, then adds the version here. A dispatcher
accepts a pinned version only if its region's catalog holds it; a worker fetches a version's
files by the hash recorded here and refuses files that do not match it.
"""

from __future__ import annotations

import json
import time

import redis
from pydantic import BaseModel

from animfleet.families import FamilySpec
from animfleet.region.keys import MODEL_CATALOG


class CatalogEntry(BaseModel):
    """One version as the region knows it."""

    ref: str  # name@version
    hash: str  # sha256 over its files' paths and hashes
    bytes: int
    files: int
    pushed_at: float = 0.0
    # The image-to-video family's rules for this checkpoint (None: the built-in model).
    family: FamilySpec | None = None


class ModelCatalog:
    """``models:<region>``: name@version -> :class:`CatalogEntry`."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region
        self.key = MODEL_CATALOG + region

    def add(self, entry: CatalogEntry) -> None:
        entry = entry.model_copy(update={"pushed_at": entry.pushed_at or time.time()})
        self.redis.hset(self.key, entry.ref, entry.model_dump_json())

    def get(self, ref: str) -> CatalogEntry | None:
        raw = self.redis.hget(self.key, ref)
        return CatalogEntry.model_validate_json(raw) if isinstance(raw, bytes) else None

    def refs(self) -> set[str]:
        return {ref.decode() for ref in self.redis.hkeys(self.key)}  # type: ignore[union-attr]

    def entries(self) -> list[CatalogEntry]:
        raw: dict[bytes, bytes] = self.redis.hgetall(self.key)  # type: ignore[assignment]
        return sorted(
            (CatalogEntry.model_validate(json.loads(value)) for value in raw.values()),
            key=lambda entry: entry.ref,
        )

    def remove(self, ref: str) -> bool:
        return bool(self.redis.hdel(self.key, ref))
