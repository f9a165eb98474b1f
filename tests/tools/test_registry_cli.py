"""``animfleet model push|list|show`` against a real Redis and per-region buckets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from animfleet.region.catalog import ModelCatalog
from launcher.command import main
from storage.local import LocalStore
from storage.registry import ModelRegistry, content_hash, directory_files

REF = "animfleet-small-distilled@1"


@pytest.fixture
def fleet(redis_client: redis.Redis, tmp_path: Path) -> Iterator[Path]:
    """Two regions: Redis databases 15 and 14, each with its own local bucket."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    redis.Redis(port=port, db=14).flushdb()
    path = tmp_path / "fleet.toml"
    path.write_text(
        "".join(
            f'[regions.{name}]\nbroker_url = "redis://127.0.0.1:{port}/{db}"\n'
            f'[regions.{name}.storage]\nroot = "{tmp_path / name}"\nprefix = "{name}/"\n'
            for name, db in (("one", 15), ("two", 14))
        )
    )
    yield path
    redis.Redis(port=port, db=14).flushdb()


def test_push_list_show_in_every_region(
    fleet: Path,
    redis_client: redis.Redis,
    shipped_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    digest = content_hash(directory_files(shipped_model))
    assert main(["--fleet", str(fleet), "model", "push", "animfleet-small-distilled", REF]) == 0
    pushed = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:3] for line in pushed] == [
        ["one", REF, digest[:12]],
        ["two", REF, digest[:12]],
    ]
    port = redis_client.connection_pool.connection_kwargs["port"]
    for name, client in (("one", redis_client), ("two", redis.Redis(port=port, db=14))):
        entry = ModelCatalog(client, name).get(REF)
        assert entry is not None and entry.hash == digest and entry.files > 10
        registry = ModelRegistry(LocalStore(tmp_path / name), prefix=f"{name}/")
        assert registry.manifest(REF).hash == digest

    assert main(["--fleet", str(fleet), "model", "list", "--region", "two"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["REGION", "REF", "HASH", "SIZE", "PUSHED", "(UTC)"]
    size = sum(file.bytes for file in directory_files(shipped_model)) / 1e6
    assert table[1].split()[:5] == ["two", REF, digest[:12], f"{size:.1f}", "MB"]

    assert main(["--fleet", str(fleet), "model", "show", REF, "--region", "one"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["hash"] == digest and shown["ref"] == REF


def test_a_second_region_push_and_errors(
    fleet: Path, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_index.json").write_text('{"_class_name": "AnimationPipeline"}')
    base = ["--fleet", str(fleet), "model"]
    assert main([*base, "push", str(model), "m@1", "--region", "two"]) == 0
    capsys.readouterr()
    assert ModelCatalog(redis_client, "one").refs() == set()  # only the region asked for

    (model / "model_index.json").write_text('{"_class_name": "AnimationPipeline", "changed": 1}')
    for argv, says in [
        (["push", str(model), "m@1"], "immutable"),  # refused before touching region one
        (["push", str(model), "no-version"], "name@version"),
        (["push", str(tmp_path / "missing"), "m@2"], "no model directory"),
        (["push", str(tmp_path), "m@2"], "no model_index.json"),
        (["show", "m@7"], "no model version m@7 in region one"),
        (["list", "--region", "three"], "unknown region 'three'"),
    ]:
        assert main([*base, *argv]) == 2, argv
        error = capsys.readouterr().err
        assert error.startswith("animfleet: error: ") and says in error, error
    assert ModelCatalog(redis_client, "one").refs() == set()
