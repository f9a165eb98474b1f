"""The dispatcher's add-on checks: the request's shape, and what the region serves (real
Redis)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
import redis

from animfleet.addons import AddonUse, control_input
from animfleet.region.served_addons import RegionAddons
from dispatcher.addon_input import AddonChecker, take_images
from dispatcher.inputs import InvalidInput, parse_request
from dispatcher.prepared import CheckedImage, PreparedInputs
from dispatcher.records import fingerprint

X = PreparedInputs.of(b"x", CheckedImage.known(b"x", 1, 1))  # only its digest matters here


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
    assert fingerprint(X, plain, "east") != fingerprint(X, with_addon, "east")


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


def test_control_images_are_taken_off_the_request_and_checked(
    make_image: Callable[..., bytes],
) -> None:
    image = make_image()
    addons, images = take_images([{"name": "shake"}, {"name": "path", "image": image}])
    digest = hashlib.sha256(image).hexdigest()
    assert addons == [{"name": "shake"}, {"name": "path", "image_sha256": digest}]
    assert images == {control_input("path"): image}
    request = parse_request(prompt="still", addons=addons)
    assert request.addons[1] == AddonUse(name="path", image_sha256=digest)
    with pytest.raises(InvalidInput) as caught:
        take_images([{"name": "shake"}, {"name": "path", "image": b"not an image"}])
    assert caught.value.field == "addons.1.image" and "PNG, JPEG or WebP" in caught.value.message
    with pytest.raises(InvalidInput) as caught:
        take_images([{"name": "path", "image_sha256": digest}])
    assert caught.value.field == "addons.0.image_sha256"
    with pytest.raises(InvalidInput) as caught:
        take_images([{"name": "path", "image": "data:image/png;base64,AAAA"}])
    assert caught.value.field == "addons.0.image" and "str" in caught.value.message


def test_an_addon_gets_an_image_exactly_when_it_takes_one(redis_client: redis.Redis) -> None:
    checker = AddonChecker(lambda region: redis_client, ttl_s=0.0)
    RegionAddons(redis_client, "east").advertise(["shake", "path"], with_image=["path"])
    assert checker.with_image("east") == {"path"}
    digest = "0" * 64
    checker.check("east", [AddonUse(name="shake"), AddonUse(name="path", image_sha256=digest)])
    with pytest.raises(InvalidInput, match="needs a control image") as caught:
        checker.check("east", [AddonUse(name="shake"), AddonUse(name="path")])
    assert caught.value.field == "addons.1.image"
    with pytest.raises(InvalidInput, match="takes no control image") as caught:
        checker.check("east", [AddonUse(name="shake", image_sha256=digest)])
    assert caught.value.field == "addons.0.image"
    assert not checker.serves("east", [AddonUse(name="path")])
