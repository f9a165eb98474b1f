"""``animfleet local up --model DIR`` with a checkpoint of an image-to-video family: the local
fleet's workers serve it, and its regions deploy it as their default, so the gateway fits every
job to the family's rules (frames, sizes, loop, text) exactly as for a pushed version."""

from __future__ import annotations

import re
from pathlib import Path

from animfleet.families import spec_of_checkpoint
from animfleet.region.catalog import ModelCatalog
from animfleet.region.deployments import Deployment, Deployments
from animfleet.region.store_client import store_client
from animfleet.topology import Topology
from animfleet.versions import DEFAULT_DEPLOYMENT
from storage import open_store
from storage.catalog_entry import catalog_entry
from storage.registry import ModelRegistry

LOCAL_VERSION = "local"


def local_ref(model_dir: Path) -> str:
    """``<directory name>@local``, the name lowercased to what version names allow."""
    name = re.sub(r"[^a-z0-9._-]+", "-", model_dir.name.lower()).strip("-._")[:64] or "model"
    return f"{name}@{LOCAL_VERSION}"


def deploy_own_model(topology: Topology, model_dir: Path) -> str | None:
    """Push a family checkpoint to every region's registry and make it the regions' default
    deployment; returns its ref, or None for the built-in model (nothing to do). Raises
    :class:`animfleet.families.UnknownFamily` for a class no family serves."""
    if spec_of_checkpoint(model_dir) is None:
        return None
    ref = local_ref(model_dir)
    deployment = Deployment(name=DEFAULT_DEPLOYMENT, versions={ref: 100.0}, stable=ref)
    for region in topology.regions.values():
        registry = ModelRegistry(open_store(region.storage), region.storage.prefix)
        entry = catalog_entry(registry.push(model_dir, ref), model_dir)
        client = store_client(region.store)
        try:
            ModelCatalog(client, region.name).add(entry)
            Deployments(client, region.name).put(deployment, "animfleet local up --model")
        finally:
            client.close()
    return ref
