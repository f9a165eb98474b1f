"""A pushed version as its region's catalog lists it: its manifest, and the family rules of the
checkpoint it was pushed from (what the dispatcher fits jobs to)."""

from __future__ import annotations

from pathlib import Path

from animfleet.families import spec_of_checkpoint
from animfleet.region.catalog import CatalogEntry
from storage.registry import Manifest


def catalog_entry(manifest: Manifest, source: Path) -> CatalogEntry:
    """The catalog's entry of ``manifest``, pushed from ``source``; raises
    :class:`animfleet.families.UnknownFamily` for a pipeline class no family serves."""
    return CatalogEntry(
        ref=manifest.ref,
        hash=manifest.hash,
        bytes=manifest.bytes,
        files=len(manifest.files),
        pushed_at=manifest.pushed_at,
        family=spec_of_checkpoint(source),
    )
