"""The fleet topology: which regions exist, where their brokers and buckets are, how far apart.

One TOML file (``fleet.toml``) describes a deployment; environment variables override single
values so a process can be pointed elsewhere without editing the file::

    [regions.us-east]
    broker_url = "redis://10.0.0.5:6379/0"
    store_url = "redis://10.0.0.5:6379/0"  # optional: the broker's Redis when absent
    latency_ms = { eu-west = 80 }

    [regions.us-east.storage]
    backend = "s3"
    bucket = "animfleet-us-east"
    endpoint_url = "https://s3.us-east-1.amazonaws.com"

A region has two servers, which may be one: its **broker** (the Celery queues its GPU workers
consume: Redis, or RabbitMQ for replicated queues) and its **store** (job records, backlog,
heartbeats, idempotency: a Redis, or a Redis Cluster such as MemoryDB with a
``redis+cluster://`` URL). Without ``store_url`` the store is the broker's Redis.

Overrides: ``ANIMFLEET_FLEET_FILE`` picks the file, ``ANIMFLEET_REGION_<NAME>_BROKER_URL``,
``..._STORE_URL``,
``..._STORAGE_BACKEND``, ``..._STORAGE_BUCKET``, ``..._STORAGE_ENDPOINT_URL``,
``..._STORAGE_ROOT`` and ``..._STORAGE_PREFIX`` change one region (``<NAME>`` is the region name
upper-cased with ``-`` as ``_``).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

REGION_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")
DEFAULT_FLEET_FILE = Path(__file__).with_name("fleet.default.toml")


def _redact(url: str) -> str:
    """Hide the password in a ``scheme://user:password@host`` URL."""
    return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", url)


class StorageConfig(BaseModel):
    """Where a region's inputs and outputs live."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["s3", "local"] = "local"
    bucket: str = "animfleet"
    prefix: str = ""
    endpoint_url: str | None = None
    region_name: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    root: str = "run/storage"
    presign_expiry_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)


class Region(BaseModel):
    """One region: its broker (the GPU queues), its store (job records, backlog, load reports)
    and its storage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    broker_url: str
    store_url: str = ""  # "" = the broker's Redis (see :attr:`store`)
    storage: StorageConfig = StorageConfig()
    latency_ms: dict[str, float] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_is_dns_like(cls, value: str) -> str:
        if not REGION_NAME.match(value):
            raise ValueError(
                f"region name must be lowercase letters, digits and '-' (2-32 chars), got {value!r}"
            )
        return value

    @property
    def store(self) -> str:
        """The URL of the region's store: ``store_url``, or the broker's when none is given."""
        return self.store_url or self.broker_url

    @property
    def store_is_broker(self) -> bool:
        """Whether the store and the broker are one Redis, so that a store script can push a
        Celery message onto a GPU queue in the same atomic call."""
        return self.store == self.broker_url

    @property
    def queue(self) -> str:
        """The Celery queue that this region's GPU workers consume."""
        return f"animate.{self.name}"

    def __repr__(self) -> str:
        return (
            f"Region(name={self.name!r}, broker_url={_redact(self.broker_url)!r}, "
            f"store={_redact(self.store)!r})"
        )


class Topology(BaseModel):
    """Every region of a deployment plus the latency between each pair."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    regions: dict[str, Region]

    @model_validator(mode="after")
    def _check(self) -> Topology:
        if not self.regions:
            raise ValueError("a topology needs at least one region")
        for name, region in self.regions.items():
            if region.name != name:
                raise ValueError(f"region key {name!r} does not match its name {region.name!r}")
            unknown = set(region.latency_ms) - set(self.regions)
            if unknown:
                raise ValueError(
                    f"region {name!r} lists latency to unknown regions {sorted(unknown)}"
                )
        return self

    def region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise KeyError(f"unknown region {name!r}; known: {sorted(self.regions)}") from None

    @property
    def names(self) -> list[str]:
        return list(self.regions)

    def latency(self, source: str, target: str) -> float:
        """Round-trip milliseconds between two regions (symmetric; 0 to itself)."""
        if source == target:
            return 0.0
        a, b = self.region(source), self.region(target)
        if target in a.latency_ms:
            return a.latency_ms[target]
        if source in b.latency_ms:
            return b.latency_ms[source]
        raise KeyError(f"no latency given between {source!r} and {target!r}")

    def by_distance(self, source: str) -> list[str]:
        """All regions, nearest first, starting with ``source`` itself."""
        return sorted(self.regions, key=lambda name: (self.latency(source, name), name))

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, object], env: Mapping[str, str] | None = None
    ) -> Topology:
        raw_regions = data.get("regions", {})
        if not isinstance(raw_regions, Mapping):
            raise ValueError("'regions' must be a table of region tables")
        env = os.environ if env is None else env
        regions: dict[str, Region] = {}
        for name, raw in raw_regions.items():
            if not isinstance(raw, Mapping):
                raise ValueError(f"region {name!r} must be a table")
            fields = {"name": name, **raw}
            storage = dict(fields.pop("storage", {}) or {})
            prefix = f"ANIMFLEET_REGION_{str(name).upper().replace('-', '_')}_"
            if broker := env.get(prefix + "BROKER_URL"):
                fields["broker_url"] = broker
            if store := env.get(prefix + "STORE_URL"):
                fields["store_url"] = store
            for key in ("backend", "bucket", "endpoint_url", "root", "prefix"):
                if value := env.get(prefix + "STORAGE_" + key.upper()):
                    storage[key] = value
            regions[str(name)] = Region(**fields, storage=StorageConfig(**storage))
        return cls(regions=regions)

    @classmethod
    def load(cls, path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Topology:
        """Read the topology from ``path``, ``$ANIMFLEET_FLEET_FILE`` or the built-in default."""
        env = os.environ if env is None else env
        chosen = Path(path or env.get("ANIMFLEET_FLEET_FILE") or DEFAULT_FLEET_FILE)
        with chosen.open("rb") as handle:
            return cls.from_mapping(tomllib.load(handle), env)
