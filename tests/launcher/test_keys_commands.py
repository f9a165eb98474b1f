from pathlib import Path

import pytest
import redis

from animfleet.region.tenants import Tenants
from launcher.command import main


def test_keys_create_list_revoke_in_every_region(
    redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = redis_client.connection_pool.connection_kwargs["port"]
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f'[regions.one]\nbroker_url = "redis://127.0.0.1:{port}/15"\n'
        f'[regions.two]\nbroker_url = "redis://127.0.0.1:{port}/14"\n'
    )
    other = redis.Redis(port=port, db=14)
    other.flushdb()
    assert main(["--fleet", str(fleet), "keys", "create", "--tenant", "acme"]) == 0
    key = capsys.readouterr().out.strip()
    for db in (redis_client, other):  # any region's gateway accepts it
        assert Tenants(db).authenticate(key).tenant == "acme"
    assert main(["--fleet", str(fleet), "keys", "list", "--tenant", "acme"]) == 0
    listed = capsys.readouterr().out
    assert "active" in listed and key not in listed and key.split("_")[1] in listed
    assert main(["--fleet", str(fleet), "keys", "revoke", key, "--tenant", "acme"]) == 0
    assert all(Tenants(db).keys("acme")[0].revoked for db in (redis_client, other))
    assert capsys.readouterr().out.strip() == "revoked"
    assert main(["--fleet", str(fleet), "keys", "webhook-secret", "--tenant", "acme"]) == 0
    secret = capsys.readouterr().out.strip()
    assert all(Tenants(db).webhook_secrets("acme") == [secret] for db in (redis_client, other))
    with pytest.raises(SystemExit):
        main(["--fleet", str(fleet), "keys", "revoke", key, "--tenant", "beta"])
    limits = ["keys", "limits", "--tenant", "acme", "--rate", "5", "--weight", "2"]
    assert main(["--fleet", str(fleet), *limits, "--retention-days", "30"]) == 0
    for db in (redis_client, other):  # every region's gateways and scheduler read them
        assert Tenants(db).limits("acme").rate_per_s == 5.0
        assert Tenants(db).limits("acme").retention_s == 30 * 86400
        assert Tenants(db).weights() == {"acme": 2.0}
    with pytest.raises(SystemExit):
        main(["--fleet", str(fleet), "keys", "limits", "--tenant", "acme", "--weight", "0"])
    other.flushdb()


def test_keys_refuse_to_run_without_a_fleet_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The built-in topology's Redis is whatever answers on 127.0.0.1:6379: never written to.
    monkeypatch.delenv("ANIMFLEET_FLEET_FILE", raising=False)
    for argv in (
        ["keys", "create", "--tenant", "acme"],
        ["keys", "list", "--tenant", "acme"],
        ["keys", "limits", "--tenant", "acme", "--rate", "5"],
    ):
        assert main(argv) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "give --fleet FILE or set ANIMFLEET_FLEET_FILE" in line
