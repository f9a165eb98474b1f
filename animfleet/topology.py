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
consume: Redis, or RabbitMQ with quorum queues for replicated ones, ``amqp://``/``amqps://``,
which then needs a ``store_url``) and its **store** (job records, backlog,
heartbeats, idempotency: a Redis, or a Redis Cluster such as MemoryDB with a
``redis+cluster://`` URL). Without ``store_url`` the store is the broker's Redis.

A region may be split into **cells** (``cells = N``): cell ``k`` is a unit of its own named
``<region>-c<k>`` (``us-east-c1``), with its own broker, store, queue ``animate.<cell>``,
workers, scheduler and sweeper, and every per-region part of the fleet runs per cell. A cell
takes the region's table (broker, store, storage, latency) and its own table overrides it; each
cell needs its own store, since one Redis is what a cell exists to divide. The cells' tables
are either under the region (as the Terraform module writes them; their keys name the cells)::

    [regions.us-east]
    broker_url = "amqps://b-1.mq.us-east-1.amazonaws.com:5671"  # one broker, a queue per cell
    latency_ms = { eu-west = 80 }
    [regions.us-east.cells.c1]
    store_url = "redis://10.0.0.5:6379/0"
    [regions.us-east.cells.c2]
    store_url = "redis://10.0.0.6:6379/0"

or a count, ``cells = 2``, with each cell's table under its own name, ``[regions.us-east-c1]``.

:attr:`Topology.regions` holds the units (cells, and regions not split); the region name a
caller gives (``us-east``) maps to its cells (:meth:`Topology.cells_of`). Sibling cells are 0 ms
apart and a cell is as far from another region as its region is.

Overrides: ``ANIMFLEET_FLEET_FILE`` picks the file, ``ANIMFLEET_REGION_<NAME>_BROKER_URL``,
``..._STORE_URL``,
``..._STORAGE_BACKEND``, ``..._STORAGE_BUCKET``, ``..._STORAGE_ENDPOINT_URL``,
``..._STORAGE_ROOT`` and ``..._STORAGE_PREFIX`` change one region (``<NAME>`` is the region name
upper-cased with ``-`` as ``_``; a cell's own name, e.g. ``ANIMFLEET_REGION_US_EAST_C1_...``,
changes one cell).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import tomllib
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

REGION_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")
DEFAULT_FLEET_FILE = Path(__file__).with_name("fleet.default.toml")
# How long a cell may still hold a tenant's idempotency and client-chosen-id entries after the
# tenant moved to a newly added cell: the longest such an entry lives (a client-chosen id lives
# as long as its record, 7 days).
CELL_MOVE_WINDOW_S = 7 * 24 * 3600


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
    cell_of: str = ""  # the region this cell belongs to; "" for a region not split
    # When this cell joined its region (a cell added to a running region says so): it takes
    # tenants from then on, and their earlier cells are still asked for their keys for a while
    # (:meth:`Topology.earlier_cells_for`). None: a cell since the region was split.
    added_at: datetime | None = None

    @field_validator("name")
    @classmethod
    def _name_is_dns_like(cls, value: str) -> str:
        if not REGION_NAME.match(value):
            raise ValueError(
                f"region name must be lowercase letters, digits and '-' (2-32 chars), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _store_is_redis(self) -> Region:
        if not self.store.startswith(("redis://", "rediss://", "redis+cluster://", "rediss+")):
            raise ValueError(
                f"region {self.name!r}: a broker that is not Redis needs a store_url (a Redis)"
            )
        return self

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

    @property
    def group(self) -> str:
        """The region name a caller gives: its region's for a cell, its own otherwise."""
        return self.cell_of or self.name

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
        known = set(self.regions) | {region.group for region in self.regions.values()}
        for name, region in self.regions.items():
            if region.name != name:
                raise ValueError(f"region key {name!r} does not match its name {region.name!r}")
            if region.cell_of in self.regions:
                raise ValueError(f"cell {name!r} belongs to {region.cell_of!r}, also a region")
            unknown = set(region.latency_ms) - known
            if unknown:
                raise ValueError(
                    f"region {name!r} lists latency to unknown regions {sorted(unknown)}"
                )
        stores: dict[tuple[str, str], str] = {}
        for name, region in self.regions.items():
            if not region.cell_of:
                continue
            earlier = stores.setdefault((region.cell_of, region.store), name)
            if earlier != name:
                raise ValueError(
                    f"cells {earlier!r} and {name!r} share the store {_redact(region.store)}: "
                    f"give each cell its own broker_url (or store_url) in [regions.<cell>]"
                )
        return self

    def region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise KeyError(f"unknown region {name!r}; known: {sorted(self.regions)}") from None

    @property
    def names(self) -> list[str]:
        """Every unit that runs on its own: the cells, and the regions not split."""
        return list(self.regions)

    @property
    def groups(self) -> list[str]:
        """The region names callers give: a split region once, not its cells."""
        return list(dict.fromkeys(region.group for region in self.regions.values()))

    def cells_of(self, name: str) -> list[str]:
        """The units a region name stands for: a split region's cells, else the name itself
        (a cell, or a region not split)."""
        if name in self.regions:
            return [name]
        cells = [cell for cell, region in self.regions.items() if region.cell_of == name]
        if not cells:
            raise KeyError(f"unknown region {name!r}; known: {sorted(self.groups)}")
        return cells

    def siblings(self, name: str) -> list[str]:
        """The other cells of ``name``'s region ([] for a region not split)."""
        group = self.region(name).cell_of
        if not group:
            return []
        return [cell for cell in self.cells_of(group) if cell != name]

    def cell_for(self, name: str, tenant: str, now: float | None = None) -> str:
        """The unit that is home to ``tenant``'s jobs in region ``name``: for a split region,
        the tenant's cell by rendezvous hashing over the cells added by ``now`` (every
        dispatcher agrees without talking, and adding a cell moves only the tenants the new
        cell wins); a unit name as is."""
        cells = self.cells_of(name)
        if len(cells) == 1:
            return cells[0]
        at = time.time() if now is None else now
        present = [cell for cell in cells if self._added_by(cell, at)]
        return _rendezvous(present or cells, tenant)

    def earlier_cells_for(self, name: str, tenant: str, now: float | None = None) -> list[str]:
        """The cells other than :meth:`cell_for`'s that may still hold ``tenant``'s
        idempotency and client-chosen-id entries: its cell before each cell added to region
        ``name`` in the last :data:`CELL_MOVE_WINDOW_S` (entries bound there live that long
        at most). [] for a region not split, a cell named directly, or no recent addition."""
        cells = self.cells_of(name)
        if len(cells) == 1:
            return []
        at = time.time() if now is None else now
        current = self.cell_for(name, tenant, at)
        earlier: list[str] = []
        for cell in cells:
            added = self.regions[cell].added_at
            if added is None or not at - CELL_MOVE_WINDOW_S <= added.timestamp() <= at:
                continue
            before = [other for other in cells if self._added_by(other, added.timestamp(), True)]
            if before:
                winner = _rendezvous(before, tenant)
                if winner != current and winner not in earlier:
                    earlier.append(winner)
        return earlier

    def _added_by(self, cell: str, at: float, strictly: bool = False) -> bool:
        """Whether ``cell`` was part of its region at ``at`` (``strictly``: before it)."""
        added = self.regions[cell].added_at
        if added is None:
            return True
        return added.timestamp() < at if strictly else added.timestamp() <= at

    def latency(self, source: str, target: str) -> float:
        """Round-trip milliseconds between two units (symmetric; 0 to itself and between the
        cells of one region; a cell is as far from another region as its region is)."""
        if source == target:
            return 0.0
        a, b = self.region(source), self.region(target)
        if a.group == b.group:
            return 0.0
        for first, second in ((a, b), (b, a)):
            for key in (second.name, second.group):
                if key in first.latency_ms:
                    return first.latency_ms[key]
        raise KeyError(f"no latency given between {source!r} and {target!r}")

    def by_distance(self, source: str) -> list[str]:
        """All units, nearest first, starting with ``source`` itself, then its sibling cells."""
        group = self.region(source).group

        def distance(name: str) -> tuple[bool, float, bool, str]:
            sibling = self.regions[name].group == group
            return (name != source, self.latency(source, name), not sibling, name)

        return sorted(self.regions, key=distance)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, object], env: Mapping[str, str] | None = None
    ) -> Topology:
        raw_regions = data.get("regions", {})
        if not isinstance(raw_regions, Mapping):
            raise ValueError("'regions' must be a table of region tables")
        env = os.environ if env is None else env
        tables: dict[str, Mapping[str, object]] = {}
        for name, raw in raw_regions.items():
            if not isinstance(raw, Mapping):
                raise ValueError(f"region {name!r} must be a table")
            tables[str(name)] = raw
        cell_tables = _cell_tables(tables)
        regions: dict[str, Region] = {}
        for name, raw in tables.items():
            if name in cell_tables:
                continue  # merged into its cell below
            count = raw.get("cells")
            if count is None:
                regions[name] = _region(name, dict(raw), env)
                continue
            base = {key: value for key, value in raw.items() if key != "cells"}
            inline = _table(count) if isinstance(count, Mapping) else {}
            for cell in _cell_names(name, count):
                own = {**_table(inline.get(cell[len(name) + 1 :])), **cell_tables.get(cell, {})}
                fields = {**base, **own, "cell_of": name}
                fields["storage"] = {**_table(base.get("storage")), **_table(own.get("storage"))}
                regions[cell] = _region(cell, fields, env)
        return cls(regions=regions)

    @classmethod
    def load(cls, path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Topology:
        """Read the topology from ``path``, ``$ANIMFLEET_FLEET_FILE`` or the built-in default."""
        env = os.environ if env is None else env
        chosen = Path(path or env.get("ANIMFLEET_FLEET_FILE") or DEFAULT_FLEET_FILE)
        with chosen.open("rb") as handle:
            return cls.from_mapping(tomllib.load(handle), env)


def _rendezvous(cells: list[str], tenant: str) -> str:
    """The cell with the highest ``sha256(tenant/cell)``."""
    return max(cells, key=lambda cell: hashlib.sha256(f"{tenant}/{cell}".encode()).digest())


CELL_NAME = re.compile(r"^(?P<region>.+)-c(?P<index>[1-9][0-9]*)$")


def _cell_names(region: str, cells: object) -> list[str]:
    """A split region's cells: ``cells = N`` names c1..cN; a table of cell tables
    (``[regions.us-east.cells.c1]``, as the Terraform module writes) names its keys."""
    if isinstance(cells, Mapping):
        keys = [str(key) for key in cells]
        wrong = [key for key in keys if not re.fullmatch(r"c[1-9][0-9]*", key)]
        if not keys or wrong or len(keys) > 64:
            raise ValueError(f"region {region!r}: cells are named c1, c2, ... (got {keys})")
        return [f"{region}-{key}" for key in keys]
    if type(cells) is not int or not 1 <= cells <= 64:
        raise ValueError(f"region {region!r}: cells must be a whole number 1-64, got {cells!r}")
    return [f"{region}-c{index}" for index in range(1, cells + 1)]


def _cell_tables(tables: Mapping[str, Mapping[str, object]]) -> dict[str, Mapping[str, object]]:
    """The tables that configure a cell of a split region (``[regions.us-east-c1]``)."""
    found: dict[str, Mapping[str, object]] = {}
    for name, raw in tables.items():
        match = CELL_NAME.match(name)
        parent = tables.get(match["region"]) if match else None
        if match is None or parent is None or "cells" not in parent:
            continue
        if name not in _cell_names(match["region"], parent["cells"]):
            raise ValueError(f"region {match['region']!r} has no cell {name!r}")
        if "cells" in raw:
            raise ValueError(f"cell {name!r} cannot be split into cells")
        found[name] = raw
    return found


def _table(value: object) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table, got {value!r}")
    return {str(key): item for key, item in value.items()}


def _region(name: str, fields: dict[str, object], env: Mapping[str, str]) -> Region:
    """One unit from its table, with its ``ANIMFLEET_REGION_<NAME>_...`` overrides."""
    storage = _table(fields.pop("storage", None))
    prefix = f"ANIMFLEET_REGION_{name.upper().replace('-', '_')}_"
    if broker := env.get(prefix + "BROKER_URL"):
        fields["broker_url"] = broker
    if store := env.get(prefix + "STORE_URL"):
        fields["store_url"] = store
    for key in ("backend", "bucket", "endpoint_url", "root", "prefix"):
        if value := env.get(prefix + "STORAGE_" + key.upper()):
            storage[key] = value
    return Region(**{**fields, "name": name}, storage=StorageConfig(**storage))  # type: ignore[arg-type]
