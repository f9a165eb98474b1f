"""The dispatcher's version pick, against a real Redis."""

from __future__ import annotations

import pytest
import redis

from animfleet.region.catalog import CatalogEntry, ModelCatalog
from animfleet.region.deployments import Deployment, Deployments
from dispatcher.inputs import InvalidInput, parse_request
from dispatcher.version_pick import Choice, VersionChooser

STABLE, CANARY = "anim@1", "anim@2"


@pytest.fixture
def chooser(redis_client: redis.Redis) -> VersionChooser:
    catalog = ModelCatalog(redis_client, "east")
    for ref in (STABLE, CANARY):
        catalog.add(CatalogEntry(ref=ref, hash="0" * 64, bytes=1, files=1))
    return VersionChooser(lambda region: redis_client, ttl_s=0.0)


def test_no_deployment_means_the_workers_own_model(chooser: VersionChooser) -> None:
    assert chooser.choose("east", None, "k") == Choice(None, None)
    assert chooser.serves("west", None)


def test_default_deployment_serves_jobs_that_name_none(
    chooser: VersionChooser, redis_client: redis.Redis
) -> None:
    Deployments(redis_client, "east").put(
        Deployment(name="default", versions={STABLE: 1.0}, stable=STABLE)
    )
    assert chooser.choose("east", None, "k") == Choice("default", STABLE)


def test_pinned_and_deployed_versions(chooser: VersionChooser, redis_client: redis.Redis) -> None:
    Deployments(redis_client, "east").put(
        Deployment(name="rollout", versions={STABLE: 50.0, CANARY: 50.0}, stable=STABLE)
    )
    assert chooser.choose("east", CANARY, "k") == Choice(CANARY, CANARY)
    picks = {chooser.choose("east", "rollout", f"key-{i}").version for i in range(40)}
    assert picks == {STABLE, CANARY}
    assert chooser.choose("east", "rollout", "same") == chooser.choose("east", "rollout", "same")
    assert chooser.serves("east", CANARY) and not chooser.serves("west", CANARY)


@pytest.mark.parametrize(("model", "message"), [("anim@9", "no version"), ("nope", "deployment")])
def test_unknown_models_are_refused_naming_the_field(
    chooser: VersionChooser, model: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as refused:
        chooser.choose("east", model, "k")
    assert refused.value.field == "model"


def test_the_model_field_is_checked_at_the_edge() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_request(prompt="pan left", model="Bad Name@1")
    assert refused.value.field == "model"
    assert parse_request(prompt="pan left", model="anim@1").model == "anim@1"


def test_a_version_pushed_after_the_last_read_is_usable_at_once(redis_client: redis.Redis) -> None:
    chooser = VersionChooser(lambda region: redis_client, ttl_s=3600.0)
    assert chooser.choose("south", None, "k") == Choice(None, None)  # cached: nothing there
    entry = CatalogEntry(ref="anim@5", hash="0" * 64, bytes=1, files=1)
    ModelCatalog(redis_client, "south").add(entry)
    assert chooser.choose("south", "anim@5", "k") == Choice("anim@5", "anim@5")
    assert chooser.serves("south", "anim@5")
