"""Walks IANA's special-purpose registries: every entry that is not globally reachable is
refused at its first, middle and last address, and in every IPv6 form that carries it."""

from __future__ import annotations

import ipaddress

import pytest

from animfleet.netguard import BlockedURL, NetGuard
from animfleet.special_addresses import IPV4_REGISTRY, IPV6_REGISTRY, Entry, refusal

GUARD = NetGuard()


def points(entry: Entry) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    net = entry.network
    middle = net.network_address + (net.num_addresses // 2)
    return [net.network_address, middle, net.broadcast_address]


def carriers(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    """The IPv6 forms that embed ``v4``: mapped, translated, compatible, NAT64 (well-known
    and local-use), 6to4, Teredo (as the obfuscated client)."""
    value = int(v4)
    return [
        ipaddress.IPv6Address(f"::ffff:{v4}"),
        ipaddress.IPv6Address((0xFFFF << 48) | value),  # ::ffff:0:a.b.c.d
        ipaddress.IPv6Address(value),
        ipaddress.IPv6Address((0x64FF9B << 96) | value),
        ipaddress.IPv6Address((0x0064FF9B0001 << 80) | value),
        ipaddress.IPv6Address((0x2002 << 112) | (value << 80)),
        ipaddress.IPv6Address((0x20010000 << 96) | (0x08080808 << 64) | (~value & 0xFFFFFFFF)),
    ]


@pytest.mark.parametrize(
    "entry",
    [e for e in IPV4_REGISTRY + IPV6_REGISTRY if not e.globally_reachable],
    ids=lambda entry: str(entry.network),
)
def test_every_entry_that_is_not_globally_reachable_is_refused(entry: Entry) -> None:
    for address in points(entry):
        with pytest.raises(BlockedURL):
            GUARD.check_address(address)
        if isinstance(address, ipaddress.IPv4Address):
            for form in carriers(address):
                assert refusal(form) is not None, f"{form} (carrying {address}) was let through"
                with pytest.raises(BlockedURL):
                    GUARD.check_address(form)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::a9fe:a9fe",  # local-use NAT64 to the metadata service
        "::ffff:0:a9fe:a9fe",  # IPv4-translated metadata address
        "::ffff:0:a00:1",  # IPv4-translated 10.0.0.1
        "3fff::1",  # documentation, RFC 9637
        "5f00::1",  # SRv6 SIDs, RFC 9602
        "4000::1",  # not allocated: outside global unicast
        "fd00:ec2::254",  # AWS metadata over IPv6
    ],
)
def test_the_forms_found_in_the_audit_are_refused(address: str) -> None:
    with pytest.raises(BlockedURL):
        GUARD.check_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808", "192.31.196.1"]
)
def test_public_addresses_pass(address: str) -> None:
    GUARD.check_address(ipaddress.ip_address(address))


def test_an_accepted_webhook_cannot_name_a_translated_metadata_address() -> None:
    with pytest.raises(BlockedURL):
        GUARD.check_url("http://[::ffff:0:a9fe:a9fe]/latest/meta-data/")
