"""``animfleet deploy set|apply|promote|status`` against a real Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from animfleet.region.canary import VersionRuns, judge
from animfleet.region.catalog import CatalogEntry, ModelCatalog
from animfleet.region.deployments import Deployments
from launcher.command import main

STABLE, CANARY = "anim@1", "anim@2"


@pytest.fixture
def fleet(redis_client: redis.Redis, tmp_path: Path) -> Path:
    port = redis_client.connection_pool.connection_kwargs["port"]
    path = tmp_path / "fleet.toml"
    path.write_text(f'[regions.one]\nbroker_url = "redis://127.0.0.1:{port}/15"\n')
    catalog = ModelCatalog(redis_client, "one")
    for ref in (STABLE, CANARY):
        catalog.add(CatalogEntry(ref=ref, hash="0" * 64, bytes=1, files=1))
    return path


def test_set_judge_status_promote(
    fleet: Path, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    run = ["--fleet", str(fleet), "deploy"]
    assert main([*run, "set", "web", f"{STABLE}=95", f"{CANARY}=5", "--stable", STABLE,
                 "--min-samples", "2"]) == 0  # fmt: skip
    assert "anim@2 5%" in capsys.readouterr().out
    runs = VersionRuns(redis_client, "one")
    runs.record(CANARY, "one.a", False, 1.0)
    runs.record(CANARY, "one.b", False, 1.0)
    assert [event.version for event in judge(redis_client, "one", "web")] == [CANARY]
    assert main([*run, "status", "web", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["one"]["web"]
    assert report["weights"] == {STABLE: 95.0, CANARY: 0.0}
    assert report["health"][CANARY]["error_rate"] == 1.0
    (rollback, _) = report["events"]
    assert rollback["kind"] == "rollback" and rollback["failed_jobs"] == ["one.a", "one.b"]
    assert main([*run, "status"]) == 0
    text = capsys.readouterr().out
    assert "rollback anim@2: error rate 100%" in text and "failed jobs: one.a, one.b" in text
    assert main([*run, "promote", "web", CANARY]) == 0
    promoted = Deployments(redis_client, "one").get("web")
    assert promoted is not None and promoted.stable == CANARY


def test_apply_a_file_and_refuse_what_the_region_lacks(
    fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "deployments.json"
    spec.write_text(json.dumps({"default": {"versions": {STABLE: 1}, "stable": STABLE}}))
    assert main(["--fleet", str(fleet), "deploy", "apply", str(spec)]) == 0
    spec.write_text(json.dumps({"default": {"versions": {"anim@9": 1}, "stable": "anim@9"}}))
    assert main(["--fleet", str(fleet), "deploy", "apply", str(spec)]) == 2
    assert "region one has no version anim@9: push it first" in capsys.readouterr().err
    assert (
        main(["--fleet", str(fleet), "deploy", "set", "x", "anim@1=abc", "--stable", STABLE]) == 2
    )
    assert "NAME@VERSION=WEIGHT" in capsys.readouterr().err
