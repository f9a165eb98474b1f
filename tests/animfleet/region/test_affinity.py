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
from animfleet.region.broker import BrokerLink
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
    redis_client: redis.Redis, broker_client: redis.Redis, store_region: Callable[[str], Region]
) -> None:
    region = store_region("east")
    direct = DirectQueues(redis_client, region)
    gone, alive = direct.register("gone"), direct.register("alive")
    for message in ("m1", "m2"):  # kombu pushes left and pops right
        broker_client.lpush(gone, message)
    broker_client.lpush(alive, "m3")
    broker_client.lpush(region.queue, "m0")
    link = None if region.store_is_broker else BrokerLink(region)  # a broker apart

    def rescue() -> int:
        alive_only: Callable[[str], bool] = lambda worker: worker == "alive"  # noqa: E731
        if link is None:
            return len(direct.rescue(consuming=alive_only))
        return direct.rescue_on(link, consuming=alive_only)

    assert rescue() == 2
    assert [m.decode() for m in broker_client.lrange(region.queue, 0, -1)] == ["m2", "m1", "m0"]
    assert broker_client.llen(gone) == 0 and broker_client.llen(alive) == 1
    assert {m.decode() for m in redis_client.smembers(direct.key)} == {"alive"}
    assert rescue() == 0
    if link is not None:
        link.close()


def test_prefetch_notices_parse_or_say_what_is_wrong() -> None:
    assert parse_prefetch(b'{"addons": ["shake"], "worker": null}') == (["shake"], None)
    assert parse_prefetch('{"addons": [], "worker": "w"}') == ([], "w")
    with pytest.raises(ValueError, match="list of add-on names"):
        parse_prefetch(b'{"addons": "shake"}')
    with pytest.raises(ValueError, match="bad worker"):
        parse_prefetch(b'{"addons": [], "worker": 3}')
