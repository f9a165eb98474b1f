import pytest
from pydantic import ValidationError

from animfleet.topology import Topology

FLEET = {
    "regions": {
        "us-east": {
            "broker_url": "redis://:hunter2@10.0.0.1:6379/0",
            "latency_ms": {"eu-west": 80, "ap-south": 200},
            "storage": {"backend": "s3", "bucket": "out-us"},
        },
        "eu-west": {"broker_url": "redis://10.0.0.2:6379/0", "latency_ms": {"ap-south": 120}},
        "ap-south": {"broker_url": "redis://10.0.0.3:6379/0"},
    }
}


def test_latency_is_symmetric_and_orders_regions() -> None:
    topology = Topology.from_mapping(FLEET, env={})
    assert topology.latency("eu-west", "us-east") == 80
    assert topology.latency("ap-south", "ap-south") == 0
    assert topology.by_distance("ap-south") == ["ap-south", "eu-west", "us-east"]
    assert topology.region("us-east").queue == "animate.us-east"


def test_environment_overrides_one_region() -> None:
    env = {
        "ANIMFLEET_REGION_US_EAST_BROKER_URL": "redis://override:6379/3",
        "ANIMFLEET_REGION_US_EAST_STORAGE_BUCKET": "other-bucket",
    }
    topology = Topology.from_mapping(FLEET, env=env)
    assert topology.region("us-east").broker_url == "redis://override:6379/3"
    assert topology.region("us-east").storage.bucket == "other-bucket"
    assert topology.region("eu-west").broker_url == "redis://10.0.0.2:6379/0"


def test_repr_hides_the_broker_password() -> None:
    region = Topology.from_mapping(FLEET, env={}).region("us-east")
    assert "hunter2" not in repr(region)


def test_unknown_latency_target_is_rejected() -> None:
    bad = {"regions": {"a1": {"broker_url": "redis://x", "latency_ms": {"nowhere": 5}}}}
    with pytest.raises(ValidationError, match="unknown regions"):
        Topology.from_mapping(bad, env={})


def test_region_names_must_be_dns_like() -> None:
    with pytest.raises(ValidationError, match="region name"):
        Topology.from_mapping({"regions": {"US_East": {"broker_url": "redis://x"}}}, env={})


def test_default_file_loads() -> None:
    assert Topology.load(env={}).names == ["local"]


def test_store_defaults_to_the_broker_and_can_be_its_own() -> None:
    plain = Topology.from_mapping({"regions": {"us-east": {"broker_url": "redis://b:6379/0"}}}, {})
    assert plain.region("us-east").store == "redis://b:6379/0"
    assert plain.region("us-east").store_is_broker
    split = Topology.from_mapping(
        {"regions": {"us-east": {"broker_url": "amqp://guest:secret@mq:5672//"}}},
        {"ANIMFLEET_REGION_US_EAST_STORE_URL": "redis+cluster://s:7000"},
    )
    region = split.region("us-east")
    assert region.store == "redis+cluster://s:7000"
    assert not region.store_is_broker
    assert "secret" not in repr(region)
