"""Which IP addresses a user-given URL may make us connect to: the globally reachable ones.

The tables are IANA's IPv4 and IPv6 Special-Purpose Address Registries, each entry with its
"Globally Reachable" column (the most specific entry decides; "N/A" counts as not reachable).
On top of them: IPv4 multicast and IPv6 multicast are refused, an IPv6 address must be global
unicast (2000::/3) or the well-known NAT64 prefix, and every IPv4 address an IPv6 address
carries (mapped, translated, compatible, NAT64, 6to4, Teredo) must itself be reachable, so no
translator (NAT64, SIIT) can turn an accepted address into a private or metadata one.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Entry(NamedTuple):
    network: Network
    globally_reachable: bool
    name: str


def _table(rows: tuple[tuple[str, bool, str], ...]) -> tuple[Entry, ...]:
    entries = (Entry(ipaddress.ip_network(net), reachable, name) for net, reachable, name in rows)
    # Most specific first, so the first match is the entry that decides.
    return tuple(sorted(entries, key=lambda entry: -entry.network.prefixlen))


IPV4_REGISTRY = _table(
    (
        ("0.0.0.0/8", False, "this network"),
        ("0.0.0.0/32", False, "this host on this network"),
        ("10.0.0.0/8", False, "private-use"),
        ("100.64.0.0/10", False, "shared address space"),
        ("127.0.0.0/8", False, "loopback"),
        ("169.254.0.0/16", False, "link local (incl. the 169.254.169.254 metadata service)"),
        ("172.16.0.0/12", False, "private-use"),
        ("192.0.0.0/24", False, "IETF protocol assignments"),
        ("192.0.0.0/29", False, "IPv4 service continuity prefix"),
        ("192.0.0.8/32", False, "IPv4 dummy address"),
        ("192.0.0.9/32", True, "port control protocol anycast"),
        ("192.0.0.10/32", True, "traversal using relays around NAT anycast"),
        ("192.0.0.170/32", False, "NAT64/DNS64 discovery"),
        ("192.0.0.171/32", False, "NAT64/DNS64 discovery"),
        ("192.0.2.0/24", False, "documentation (TEST-NET-1)"),
        ("192.31.196.0/24", True, "AS112-v4"),
        ("192.52.193.0/24", True, "AMT"),
        ("192.88.99.0/24", False, "deprecated 6to4 relay anycast"),
        ("192.168.0.0/16", False, "private-use"),
        ("192.175.48.0/24", True, "direct delegation AS112 service"),
        ("198.18.0.0/15", False, "benchmarking"),
        ("198.51.100.0/24", False, "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", False, "documentation (TEST-NET-3)"),
        ("240.0.0.0/4", False, "reserved"),
        ("255.255.255.255/32", False, "limited broadcast"),
        ("224.0.0.0/4", False, "multicast"),  # not unicast: never a web server
    )
)

IPV6_REGISTRY = _table(
    (
        ("::1/128", False, "loopback"),
        ("::/128", False, "unspecified"),
        ("::ffff:0:0/96", False, "IPv4-mapped"),
        ("::ffff:0:0:0/96", False, "IPv4-translated (SIIT)"),
        ("64:ff9b::/96", True, "IPv4-IPv6 translation (well-known NAT64)"),
        ("64:ff9b:1::/48", False, "local-use IPv4/IPv6 translation"),
        ("100::/64", False, "discard-only"),
        ("100:0:0:1::/64", False, "dummy IPv6 prefix"),
        ("2001::/23", False, "IETF protocol assignments"),
        ("2001::/32", False, "Teredo"),
        ("2001:1::1/128", True, "port control protocol anycast"),
        ("2001:1::2/128", True, "traversal using relays around NAT anycast"),
        ("2001:1::3/128", True, "DNS-SD service registration protocol anycast"),
        ("2001:2::/48", False, "benchmarking"),
        ("2001:3::/32", True, "AMT"),
        ("2001:4:112::/48", True, "AS112-v6"),
        ("2001:10::/28", False, "deprecated (ORCHID)"),
        ("2001:20::/28", True, "ORCHIDv2"),
        ("2001:30::/28", True, "drone remote ID protocol entity tags"),
        ("2001:db8::/32", False, "documentation"),
        ("2002::/16", False, "6to4"),
        ("2620:4f:8000::/48", True, "direct delegation AS112 service"),
        ("3fff::/20", False, "documentation"),
        ("5f00::/16", False, "segment routing (SRv6) SIDs"),
        ("fc00::/7", False, "unique-local (incl. fd00:ec2::254, a metadata service)"),
        ("fe80::/10", False, "link-local unicast"),
        ("ff00::/8", False, "multicast"),
    )
)

GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


def registry_entry(address: IPAddress) -> Entry | None:
    """The most specific special-purpose entry ``address`` falls in, if any."""
    table = IPV4_REGISTRY if isinstance(address, ipaddress.IPv4Address) else IPV6_REGISTRY
    return next((entry for entry in table if address in entry.network), None)


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address ``address`` carries in one of the standard forms."""
    value = int(address)
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped:
        found.append(address.ipv4_mapped)
    if address in IPV4_TRANSLATED or address in NAT64:
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if value >> 32 == 0 and value > 1:  # ::a.b.c.d, IPv4-compatible (deprecated)
        found.append(ipaddress.IPv4Address(value))
    if address.sixtofour:
        found.append(address.sixtofour)
    if address.teredo:
        found.extend(address.teredo)
    return found


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` must not be connected to, or ``None`` if it is globally reachable."""
    entry = registry_entry(address)
    if entry is not None and not entry.globally_reachable:
        return f"{address} is {entry.name} ({entry.network}), not globally reachable"
    if isinstance(address, ipaddress.IPv6Address):
        if entry is None and address not in GLOBAL_UNICAST:
            return f"{address} is outside IPv6 global unicast (2000::/3)"
        for carried in embedded_ipv4(address):
            reason = refusal(carried)
            if reason is not None:
                return f"{address} carries {carried}: {reason}"
    return None
