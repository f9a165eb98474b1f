"""The dispatcher's add-on checks: the request's shape, and what the region serves (real
Redis)."""

from __future__ import annotations

import pytest
import redis

from animfleet.addons import AddonUse
from animfleet.region.addons import RegionAddons
from dispatcher.addons import AddonChecker
from dispatcher.inputs import InvalidInput, parse_request
from dispatcher.records import fingerprint


def test_requests_validate_addons() -> None:
    request = parse_request(prompt="still", addons=[{"name": "shake", "scale": 0.5}])
    assert request.addons == (AddonUse(name="shake", scale=0.5),)
    for addons, field in (
        ([{"name": "shake"}, {"name": "shake"}], "addons"),
        ([{"name": "shake", "scale": 9}], "addons.0.scale"),
        ([{"name": "NO"}], "addons.0.name"),
        ([{"name": f"a{i}"} for i in range(4)], "addons"),
    ):
        with pytest.raises(InvalidInput) as caught:
            parse_request(prompt="still", addons=addons)
        assert caught.value.field == field


def test_fingerprints_without_addons_are_unchanged(make_image: object) -> None:
    plain = parse_request(prompt="still")
    assert '"addons"' not in plain.model_dump_json(exclude={"addons"})
    with_addon = parse_request(prompt="still", addons=[{"name": "shake"}])
    assert fingerprint(b"x", plain, "east") != fingerprint(b"x", with_addon, "east")


def test_only_addons_the_region_serves_are_accepted(redis_client: redis.Redis) -> None:
    checker = AddonChecker(lambda region: redis_client, ttl_s=0.0)
    shake = [AddonUse(name="shake")]
    checker.check("east", [])
    assert checker.serves("east", [])
    with pytest.raises(InvalidInput, match="serves: none") as caught:
        checker.check("east", shake)
    assert caught.value.field == "addons"
    RegionAddons(redis_client, "east").advertise(["shake", "pulse"])
    checker.check("east", shake)
    assert checker.serves("east", shake) and not checker.serves("west", shake)
    with pytest.raises(InvalidInput, match="orbit"):
        checker.check("east", [*shake, AddonUse(name="orbit")])
