"""A synthetic global deployment: real cloud-region locations, latency from distance."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from animfleet.topology import Topology

# name: (latitude, longitude, UTC offset in hours, relative traffic weight)
SITES: dict[str, tuple[float, float, float, float]] = {
    "us-east": (38.9, -77.0, -5, 1.6),
    "us-central": (41.3, -95.9, -6, 1.0),
    "ca-central": (45.5, -73.6, -5, 0.5),
    "us-west": (45.6, -121.2, -8, 1.2),
    "eu-west": (53.3, -6.3, 0, 1.0),
    "eu-central": (50.1, 8.7, 1, 1.2),
    "sa-east": (-23.5, -46.6, -3, 0.9),
    "ap-south": (19.1, 72.9, 5.5, 1.4),
    "ap-southeast": (1.35, 103.8, 8, 1.0),
    "ap-northeast": (35.7, 139.7, 9, 1.0),
    "uk-south": (51.5, -0.1, 0, 0.8),
    "eu-north": (59.3, 18.1, 1, 0.4),
    "eu-south": (45.5, 9.2, 1, 0.6),
    "me-central": (25.2, 55.3, 4, 0.5),
    "af-south": (-33.9, 18.4, 2, 0.4),
    "ap-east": (22.3, 114.2, 8, 0.8),
    "ap-northeast2": (37.6, 127.0, 9, 0.7),
    "au-east": (-33.9, 151.2, 10, 0.6),
    "mx-central": (20.6, -100.4, -6, 0.6),
    "us-south": (32.8, -96.8, -6, 0.8),
}
FIBER_KM_PER_MS = 200.0  # light in fibre, one way
ROUTE_INFLATION = 1.5  # cables do not follow great circles
BASE_RTT_MS = 4.0


@dataclass(frozen=True)
class World:
    """Regions, their GPU counts, the latency between them and each region's local time."""

    topology: Topology
    gpus: Mapping[str, int]
    utc_offset_h: Mapping[str, float]
    weight: Mapping[str, float]

    @property
    def names(self) -> list[str]:
        return self.topology.names


def rtt_ms(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Round-trip time between two (lat, lon) points over inflated great-circle fibre."""
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    hav = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    km = 2 * 6371.0 * math.asin(math.sqrt(hav))
    return round(BASE_RTT_MS + 2 * km * ROUTE_INFLATION / FIBER_KM_PER_MS, 1)


def make_world(regions: int | Sequence[str], gpus: int | Mapping[str, int]) -> World:
    """The first ``regions`` sites of :data:`SITES` (``us-east`` first) or the named ones,
    with ``gpus`` GPUs each (or per region)."""
    if isinstance(regions, int):
        if not 1 <= regions <= len(SITES):
            raise ValueError(f"`regions` must be between 1 and {len(SITES)}, got {regions}")
        names = list(SITES)[:regions]
    else:
        names = list(regions)
        unknown = sorted(set(names) - set(SITES))
        if unknown:
            raise ValueError(f"no location known for regions {unknown}; known: {list(SITES)}")
    latency = {
        name: {other: rtt_ms(SITES[name][:2], SITES[other][:2]) for other in names[i + 1 :]}
        for i, name in enumerate(names)
    }
    topology = Topology.from_mapping(
        {
            "regions": {
                n: {"broker_url": f"redis://sim/{n}", "latency_ms": latency[n]} for n in names
            }
        },
        env={},
    )
    counts = {n: gpus if isinstance(gpus, int) else gpus[n] for n in names}
    return World(
        topology=topology,
        gpus=counts,
        utc_offset_h={n: SITES[n][2] for n in names},
        weight={n: SITES[n][3] for n in names},
    )
