"""The hook address rule against addresses that carry an IPv4 address inside an IPv6 one: a host
that routes 6to4, NAT64 or IPv4-compatible addresses reaches the IPv4 address, so that one decides.
The delivery itself is tried too: a name resolving to such an address never gets a connection."""

from __future__ import annotations

import json

import pytest

from registry_gen.hooks.net import post
from registry_gen.hooks.rules import address_allowed

REFUSED = [
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::",  # 6to4 of the cloud metadata address
    "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b:1::808:808",  # the local-use NAT64 prefix: the site's own translator
    "::ffff:127.0.0.1",
    "::127.0.0.1",  # IPv4-compatible (deprecated, still routed by SIT tunnels)
    "::1",
    "::",
]
PUBLIC = ["2002:808:808::1", "64:ff9b::808:808", "::ffff:8.8.8.8", "2606:4700:4700::1111", "8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_an_ipv6_address_carrying_a_private_ipv4_is_refused(address: str) -> None:
    assert not address_allowed(address, ())


@pytest.mark.parametrize("address", PUBLIC)
def test_an_ipv6_address_carrying_a_public_ipv4_is_allowed(address: str) -> None:
    assert address_allowed(address, ())


def test_an_allowed_ipv4_range_covers_its_addresses_written_in_ipv6() -> None:
    assert address_allowed("2002:7f00:1::1", ("127.0.0.0/8",)) and address_allowed("64:ff9b::7f00:1", ("127.0.0.0/8",))
    assert not address_allowed("64:ff9b::a9fe:a9fe", ("127.0.0.0/8",))


@pytest.mark.parametrize("address", ["2002:a9fe:a9fe::", "64:ff9b::a9fe:a9fe"])
def test_a_delivery_to_a_name_resolving_there_is_refused_before_connecting(address: str) -> None:
    connected = []

    def resolve(host: str, port: int) -> list[str]:
        connected.append(host)
        return [address]

    body = json.dumps({"event": "package:publish"}).encode()
    outcome = post("http://hooks.example.com:8443/hook", body, {}, timeout=2, allow_networks=(), resolve=resolve)
    assert not outcome.ok and address in str(outcome.error) and connected == ["hooks.example.com"]
