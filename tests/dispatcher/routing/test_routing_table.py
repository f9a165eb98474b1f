"""The routing table: weighted choice among admissible regions, fallback, JSON round trip."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.routing import RegionLoad, RoutingTable


def test_choice_follows_the_shares() -> None:
    table = RoutingTable({"eu": {"eu": 0.7, "us": 0.3}})
    rng = random.Random(7)
    counts = Counter(table.choose("eu", rng, lambda r: True) for _ in range(20000))
    assert counts["eu"] / 20000 == pytest.approx(0.7, abs=0.02)


def test_full_regions_are_skipped_then_fallback_then_none() -> None:
    table = RoutingTable({"eu": {"eu": 0.9, "us": 0.1}}, fallback={"eu": ["ap", "sa"]})
    rng = random.Random(1)
    assert table.choose("eu", rng, lambda r: r != "eu") == "us"
    assert table.choose("eu", rng, lambda r: r == "sa") == "sa"
    assert table.choose("eu", rng, lambda r: False) is None


def test_unknown_source_stays_home() -> None:
    table = RoutingTable({"eu": {"eu": 1.0}})
    assert table.choose("new", random.Random(0), lambda r: True) == "new"


def test_shares_must_sum_to_one() -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        RoutingTable({"eu": {"eu": 0.5, "us": 0.4}})
    with pytest.raises(ValueError, match=">= 0"):
        RoutingTable({"eu": {"eu": 1.5, "us": -0.5}})


shares = st.dictionaries(
    st.sampled_from(["eu", "us", "ap", "sa"]), st.floats(0.01, 10), min_size=1
).map(lambda d: {k: v / sum(d.values()) for k, v in d.items()})


@given(st.dictionaries(st.sampled_from(["eu", "us", "ap"]), shares), st.floats(0, 1e9))
def test_json_round_trip(table_shares: dict[str, dict[str, float]], at: float) -> None:
    fallback = {source: ["sa"] for source in table_shares}
    table = RoutingTable(table_shares, fallback=fallback, computed_at=at)
    assert RoutingTable.from_json(table.to_json()) == table


def test_from_json_rejects_other_documents() -> None:
    with pytest.raises(ValueError, match="version"):
        RoutingTable.from_json('{"shares": {}}')


def test_region_load_derived_values() -> None:
    load = RegionLoad("eu", live_workers=4, busy_workers=4, queue_depth=2)
    assert (load.in_flight, load.capacity, load.headroom) == (6, 4, 0)
    assert load.utilization == 1.5 and load.offered == 6.0
    assert RegionLoad("eu", 0, 0, 0).utilization == 0.0
    with pytest.raises(ValueError, match="queue_depth"):
        RegionLoad("eu", 1, 0, -1)
