"""The URL guard: every internal address form is refused, also behind redirects; limits hold."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from animfleet.netguard import BlockedURL, FetchFailed, NetGuard

GUARD = NetGuard()
LOOPBACK_OK = NetGuard(allow_loopback=True)

BLOCKED = [
    # loopback, every spelling
    "http://127.0.0.1/",
    "http://127.1/",
    "http://127.0.0.1:8080/x",
    "http://2130706433/",  # decimal
    "http://0x7f000001/",  # hex
    "http://0177.0.0.1/",  # octal
    "http://0177.0000.0000.0001/",
    "http://017700000001/",  # octal, one number
    "http://localhost/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[::ffff:7f00:1]/",
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[64:ff9b::127.0.0.1]/",  # NAT64
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    # unspecified
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    # private
    "http://10.0.0.1/",
    "http://10.255.255.255/",
    "http://172.16.0.1/",
    "http://172.31.255.1/",
    "http://192.168.0.1/",
    "http://3232235521/",  # 192.168.0.1 in decimal
    "http://0xc0a80001/",  # 192.168.0.1 in hex
    "http://[::ffff:10.0.0.1]/",
    "http://[::ffff:192.168.1.1]/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    # link-local and cloud metadata
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.0.1/",
    "http://2852039166/",  # 169.254.169.254 in decimal
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",  # octal
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[fd00:ec2::254]/",  # AWS metadata over IPv6
    "http://[fe80::1]/",
    "http://100.100.100.200/",  # Alibaba metadata (CGNAT range)
    "http://100.64.0.1/",
    # others that are not the public internet
    "http://192.0.0.170/",
    "http://198.18.0.1/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://[ff02::1]/",
    "http://192.0.2.1/",  # documentation
    "http://[2001:db8::1]/",
]

MALFORMED = [
    "ftp://example.com/a.png",
    "file:///etc/passwd",
    "gopher://127.0.0.1/",
    "javascript:alert(1)",
    "http:///nohost",
    "http://user:secret@8.8.8.8/",
    "http://8.8.8.8:99999/",
    "http://[::1/",
    "http://" + "a" * 3000 + ".com/",
]


@pytest.mark.parametrize("url", BLOCKED)
def test_internal_addresses_are_refused(url: str) -> None:
    with pytest.raises(BlockedURL, match="not a public internet address"):
        GUARD.check_url(url)


@pytest.mark.parametrize("url", MALFORMED)
def test_other_schemes_and_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(BlockedURL):
        GUARD.check_url(url)


@pytest.mark.parametrize("url", ["http://8.8.8.8/a.png", "https://[2606:4700:4700::1111]/"])
def test_public_addresses_pass(url: str) -> None:
    GUARD.check_url(url)


def test_the_loopback_allowlist_allows_loopback_only() -> None:
    for url in ("http://127.0.0.1/", "http://2130706433/", "http://[::1]/"):
        LOOPBACK_OK.check_url(url)
    for url in ("http://10.0.0.1/", "http://169.254.169.254/", "http://[::ffff:192.168.0.1]/"):
        with pytest.raises(BlockedURL):
            LOOPBACK_OK.check_url(url)
    assert NetGuard.from_env({"ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1"}).allow_loopback
    assert not NetGuard.from_env({}).allow_loopback


def test_every_resolved_address_must_be_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name resolving to one public and one private address is refused (DNS rebinding)."""

    def resolve(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        return [(2, 1, 6, "", ("8.8.8.8", port)), (2, 1, 6, "", ("10.0.0.7", port))]

    monkeypatch.setattr("socket.getaddrinfo", resolve)
    with pytest.raises(BlockedURL, match=r"'images.example' resolves to a blocked address"):
        GUARD.check_url("https://images.example/cat.png")


def test_embedded_ipv4_forms_are_unwrapped() -> None:
    for text in ("::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1", "::10.0.0.1"):
        with pytest.raises(BlockedURL):
            GUARD.check_address(ipaddress.ip_address(text))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A loopback server: redirects to internal addresses, a big body, a slow body."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            targets = {
                "/to-metadata": "http://169.254.169.254/latest/meta-data/",
                "/to-private": "http://10.0.0.1/",
                "/to-mapped": "http://[::ffff:127.0.0.1]:1/",
                "/to-decimal": "http://2852039166/",
                "/to-ftp": "ftp://8.8.8.8/",
                "/loop": "/loop",
                "/to-ok": "/ok",
            }
            if self.path in targets:
                self.send_response(302)
                self.send_header("location", targets[self.path])
                self.send_header("content-length", "0")
                self.end_headers()
                return
            body = {"/ok": b"fine", "/big": b"x" * 5000}.get(self.path, b"slow")
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.path == "/slow":
                time.sleep(2)
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("path", ["/to-metadata", "/to-private", "/to-decimal"])
def test_redirects_to_internal_addresses_are_refused(server: str, path: str) -> None:
    with pytest.raises(BlockedURL, match="not a public internet address"):
        LOOPBACK_OK.fetch(server + path, max_bytes=1000)


def test_redirects_to_other_schemes_and_loops_are_refused(server: str) -> None:
    with pytest.raises(BlockedURL, match="scheme"):
        LOOPBACK_OK.fetch(server + "/to-ftp", max_bytes=1000)
    with pytest.raises(FetchFailed, match="redirects"):
        LOOPBACK_OK.fetch(server + "/loop", max_bytes=1000)


def test_allowed_fetch_follows_a_safe_redirect(server: str) -> None:
    assert LOOPBACK_OK.fetch(server + "/to-ok", max_bytes=1000) == b"fine"
    with pytest.raises(BlockedURL):
        GUARD.fetch(server + "/ok", max_bytes=1000)  # without the allowlist: loopback refused


def test_size_and_time_limits(server: str) -> None:
    with pytest.raises(FetchFailed, match="larger than 1000 bytes"):
        LOOPBACK_OK.fetch(server + "/big", max_bytes=1000)
    started = time.monotonic()
    with pytest.raises(FetchFailed, match=r"timed out|time limit"):
        LOOPBACK_OK.fetch(server + "/slow", max_bytes=1000, timeout_s=0.5)
    assert time.monotonic() - started < 1.5
