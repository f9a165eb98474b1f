"""Where new jobs go: region loads in, a routing table of per-source shares out."""

from animfleet.region.load import RegionLoad
from dispatcher.routing.rings import Ring, RoutingSettings, compute_routing_table
from dispatcher.routing.table import RoutingTable

__all__ = ["RegionLoad", "Ring", "RoutingSettings", "RoutingTable", "compute_routing_table"]
