"""Holdings, direct queues and prefetch notices, on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from animfleet.addons import AddonUse
from animfleet.region.affinity import (
    DirectQueues,
    Holdings,
    addon_thing,
    direct_queue,
    image_digest,
    parse_prefetch,
    template_thing,
    things_of,
)
from animfleet.topology import Region

REGION = Region(name="east", broker_url="redis://127.0.0.1:6379/0")


def test_things_name_the_template_by_the_image_digest_and_each_addon() -> None:
    things = things_of(image_digest(b"png bytes"), (AddonUse(name="shake", scale=1.0),))
    assert things == [template_thing(image_digest(b"png bytes")), addon_thing("shake")]
    assert things[0] != things_of(image_digest(b"other bytes"))[0]
    assert things_of(None) == []  # a record from before digests were kept: no template
    assert direct_queue(REGION, "gpu-1@host") == "animate.east.w.gpu-1@host"


def test_holders_are_ranked_by_how_much_they_hold_and_claims_lapse(
    redis_client: redis.Redis,
) -> None:
    holdings = Holdings(redis_client, "east")
    holdings.publish("b", ["template:x", "addon:shake"], ttl_s=30)
    holdings.publish("a", ["template:x", "addon:shake"], ttl_s=30)
    holdings.publish("c", ["addon:shake"], ttl_s=30)
    holdings.publish("soon-gone", ["template:x"], ttl_s=5)
    assert holdings.holders(["template:x", "addon:shake"], now=time.time() + 10) == {
        "a": 2,
        "b": 2,
        "c": 1,
    }
    assert holdings.candidates(["template:x", "addon:shake"]) == ["a", "b", "c", "soon-gone"]
    assert holdings.candidates(["template:x", "addon:shake"], limit=1) == ["a"]
    holdings.withdraw("a", ["template:x"])
    assert holdings.candidates(["template:x"]) == ["b", "soon-gone"]
    assert Holdings(redis_client, "west").candidates(["template:x"]) == []


def test_rescue_moves_a_gone_workers_queue_to_the_shared_one_in_order(
    redis_client: redis.Redis, store_region: Callable[[str], Region]
) -> None:
    direct = DirectQueues(redis_client, store_region("east"))
    direct.register("gone"), direct.register("alive")
    gone, alive = direct.queue("gone"), direct.queue("alive")
    for message in ("m1", "m2"):  # kombu pushes left and pops right
        redis_client.lpush(gone, message)
    redis_client.lpush(alive, "m3")
    redis_client.lpush(direct.shared, "m0")
    assert direct.rescue(consuming=lambda worker: worker == "alive") == ["m1", "m2"]
    assert [m.decode() for m in redis_client.lrange(direct.shared, 0, -1)] == ["m2", "m1", "m0"]
    assert redis_client.llen(gone) == 0 and redis_client.llen(alive) == 1
    assert {m.decode() for m in redis_client.smembers(direct.key)} == {"alive"}
    assert direct.rescue(consuming=lambda worker: worker == "alive") == []


def test_prefetch_notices_parse_or_say_what_is_wrong() -> None:
    assert parse_prefetch(b'{"addons": ["shake"], "worker": null}') == (["shake"], None)
    assert parse_prefetch('{"addons": [], "worker": "w"}') == ([], "w")
    with pytest.raises(ValueError, match="list of add-on names"):
        parse_prefetch(b'{"addons": "shake"}')
    with pytest.raises(ValueError, match="bad worker"):
        parse_prefetch(b'{"addons": [], "worker": 3}')
