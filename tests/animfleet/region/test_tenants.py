import time
from typing import Any

import pytest
import redis

from animfleet.region.jobstore import JobStore
from animfleet.region.keys import API_KEY, TENANT_KEY
from animfleet.region.listing import BadCursor, Listing, Position
from animfleet.region.ratelimit import RateLimiter
from animfleet.region.tenants import (
    Limits,
    RevokedKey,
    Tenants,
    UnknownKey,
    key_hash,
    mask,
    parse_key,
)


def test_a_key_is_random_shown_once_and_stored_only_as_its_hash(
    redis_client: redis.Redis,
) -> None:
    tenants = Tenants(redis_client)
    issued = tenants.create_key("acme", name="ci")
    other = tenants.create_key("acme")
    assert issued.key != other.key and issued.key.startswith(f"af_{issued.record.id}_")
    assert len(issued.key.split("_", 2)[2]) == 43  # 256 bits, base64
    dump = b"".join(
        value for name in redis_client.keys("*") for value in _values(redis_client, name)
    )
    secret_part = issued.key.split("_", 2)[2].encode()
    assert secret_part not in dump and issued.key.encode() not in dump
    assert redis_client.hget(API_KEY + issued.record.id, "hash") == key_hash(issued.key).encode()
    assert tenants.authenticate(issued.key).tenant == "acme"
    assert [k.id for k in tenants.keys("acme")] == sorted(
        [issued.record.id, other.record.id],
        key=lambda i: next(k.created_at for k in (issued.record, other.record) if k.id == i),
    )
    assert mask(issued.key) == f"af_{issued.record.id}_***" and issued.key not in repr(issued)


def _values(client: redis.Redis, name: Any) -> list[Any]:
    kind = client.type(name)
    if kind == b"hash":
        return list(client.hgetall(name).values())
    if kind == b"set":
        return list(client.smembers(name))
    return []


@pytest.mark.parametrize(
    "bad",
    ["", "Bearer", "af_", "af_0123456789abcdef_short", "xx_0123456789abcdef_" + "a" * 43],
)
def test_malformed_keys_are_unknown(redis_client: redis.Redis, bad: str) -> None:
    with pytest.raises(UnknownKey):
        Tenants(redis_client).authenticate(bad)


def test_a_wrong_secret_under_a_real_id_is_unknown(redis_client: redis.Redis) -> None:
    tenants = Tenants(redis_client)
    issued = tenants.create_key("acme")
    forged = f"af_{issued.record.id}_" + "A" * 43
    with pytest.raises(UnknownKey):
        tenants.authenticate(forged)
    assert parse_key(forged) == issued.record.id


def test_revoke_and_rotate_with_a_grace_period(redis_client: redis.Redis) -> None:
    tenants = Tenants(redis_client)
    first = tenants.create_key("acme")
    with pytest.raises(UnknownKey):  # another tenant cannot revoke it
        tenants.revoke(first.record.id, tenant="beta")
    second = tenants.rotate(first.record.id, grace_s=60)
    assert tenants.authenticate(first.key).tenant == "acme"  # still in its grace period
    assert tenants.authenticate(second.key).tenant == "acme"
    tenants.revoke(first.record.id, tenant="acme")  # ends the grace period now
    with pytest.raises(RevokedKey) as caught:
        tenants.authenticate(first.key)
    assert caught.value.tenant == "acme"
    assert [k.revoked for k in tenants.keys("acme")] == [True, False]


def test_limits_round_trip_and_weights(redis_client: redis.Redis) -> None:
    tenants = Tenants(redis_client)
    assert tenants.limits("nobody") == Limits()
    limits = Limits(rate_per_s=5, burst=10, in_flight=3, backlog_cap=100, weight=2)
    tenants.set_limits("acme", limits)
    tenants.set_limits("beta", Limits())
    assert tenants.limits("acme") == limits and limits.bucket_size == 10
    assert Limits(rate_per_s=0.5).bucket_size == 1
    assert tenants.weights() == {"acme": 2.0}
    with pytest.raises(ValueError):
        Limits(rate_per_s=0)
    with pytest.raises(ValueError):
        tenants.set_limits("bad name", Limits())


def test_two_webhook_secrets_are_valid_at_once(redis_client: redis.Redis) -> None:
    tenants = Tenants(redis_client)
    assert tenants.webhook_secrets("acme") == []
    first = tenants.rotate_webhook_secret("acme")
    second = tenants.rotate_webhook_secret("acme")
    third = tenants.rotate_webhook_secret("acme")
    assert first.startswith("whsec_") and tenants.webhook_secrets("acme") == [third, second]
    tenants.drop_old_webhook_secret("acme")
    assert tenants.webhook_secrets("acme") == [third]
    assert redis_client.exists(TENANT_KEY + "acme")


def test_the_token_bucket_is_shared_and_says_when_to_retry(redis_client: redis.Redis) -> None:
    gateway_a, gateway_b = RateLimiter(redis_client), RateLimiter(redis_client)
    taken = [g.take("acme", 2, 4).allowed for g in (gateway_a, gateway_b) * 2]
    assert taken == [True] * 4
    refused = gateway_a.take("acme", 2, 4)
    assert not refused.allowed and 0 < refused.retry_after_s <= 0.5
    assert gateway_b.take("beta", 2, 4).allowed  # another tenant's bucket
    deadline = time.monotonic() + 5
    while not gateway_b.take("acme", 2, 4).allowed:  # refills at 2 per second
        assert time.monotonic() < deadline


def test_listing_pages_stay_stable_while_jobs_arrive(redis_client: redis.Redis) -> None:
    listing = Listing(redis_client)
    now = time.time()
    for i in range(7):
        listing.add("acme", f"job-{i}", now + i)
    listing.add("acme", "job-6b", now + 6)  # a tie on time: ordered by id
    listing.add("beta", "other", now + 3)
    first = listing.page("acme", 3)
    assert [p.job_id for p in first] == ["job-6b", "job-6", "job-5"]
    listing.add("acme", "newer", now + 100)  # arrives between pages
    cursor = Position.parse(first[-1].cursor())
    second = listing.page("acme", 3, after=cursor)
    assert [p.job_id for p in second] == ["job-4", "job-3", "job-2"]
    rest = listing.page("acme", 10, after=second[-1])
    assert [p.job_id for p in rest] == ["job-1", "job-0"]
    window = listing.page("acme", 10, created_after=now + 1, created_before=now + 5)
    assert [p.job_id for p in window] == ["job-4", "job-3", "job-2"]
    with pytest.raises(BadCursor):
        Position.parse("not-a-cursor!")


def test_a_tenants_webhook_secrets_sign_and_either_verifies(redis_client: redis.Redis) -> None:
    from standardwebhooks import Webhook

    from workers.webhooks.sender import Sender
    from workers.webhooks.signing import sign

    tenants = Tenants(redis_client)
    old = tenants.rotate_webhook_secret("acme")
    new = tenants.rotate_webhook_secret("acme")
    sender = Sender.__new__(Sender)  # only its store is needed to pick the keys
    sender.store = JobStore(redis_client)
    body, stamp = b'{"type":"job.completed"}', int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(sender._keys("acme"), "msg_1", stamp, body),
    }
    for secret in (old, new):  # a receiver holding either one accepts the event
        Webhook(secret).verify(body, headers)
