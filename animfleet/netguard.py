"""Outbound HTTP to user-given URLs (input images, webhooks) without reaching internal services.

Every request goes to an address that was checked: the host is resolved once, *every* resolved
address must be globally reachable by IANA's special-purpose registries, including every IPv4
address it carries (:mod:`animfleet.special_addresses`), and the connection is made to that checked
address (the name is kept for ``Host`` and TLS SNI), so a DNS answer that changes between check
and connect (rebinding) cannot redirect it. Redirects are followed by hand, each hop checked
again. Sizes and total time are bounded.

``allow_loopback`` (env ``ANIMFLEET_NETGUARD_ALLOW_LOOPBACK=1``) permits 127.0.0.0/8 and ::1,
and nothing else, for local development and tests. It is off by default.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic_settings import SettingsConfigDict

from animfleet.errors import PermanentError
from animfleet.settings import EnvSettings, load
from animfleet.special_addresses import refusal

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = ("http", "https")
MAX_URL_CHARS = 2048
MAX_REDIRECTS = 5
LOOPBACK = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]


class BlockedURL(PermanentError, ValueError):
    """The URL may not be fetched: wrong scheme, unresolvable, or an internal address."""


class FetchFailed(PermanentError, RuntimeError):
    """The URL was allowed but fetching it failed (timeout, too large, HTTP error)."""


class NetGuardEnv(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_NETGUARD_")

    allow_loopback: bool = False


@dataclass(frozen=True)
class NetGuard:
    """The policy for outbound requests; build with :meth:`from_env`."""

    allow_loopback: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NetGuard:
        """``ANIMFLEET_NETGUARD_ALLOW_LOOPBACK`` (1/true/yes or 0/false/no; unset: off)."""
        return cls(allow_loopback=load(NetGuardEnv, env).allow_loopback)

    # -- checks ------------------------------------------------------------------------------
    def check_address(self, address: IPAddress) -> None:
        """Raise :class:`BlockedURL` unless ``address`` (and every IPv4 address it carries) is
        globally reachable by IANA's special-purpose registries."""
        if self.allow_loopback and any(address in net for net in LOOPBACK):
            return
        reason = refusal(address)
        if reason is not None or not address.is_global:  # Python's view too, for depth
            raise BlockedURL(f"address {address} is not a public internet address")

    def resolve(self, url: str) -> tuple[str, int, list[IPAddress]]:
        """Check ``url``'s form and resolve its host; returns (host, port, checked addresses)."""
        if len(url) > MAX_URL_CHARS:
            raise BlockedURL(f"URL is longer than {MAX_URL_CHARS} characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise BlockedURL(f"URL {url!r} is malformed: {error}") from None
        if parts.scheme not in ALLOWED_SCHEMES:
            raise BlockedURL(f"URL scheme must be http or https, got {parts.scheme!r}")
        host = parts.hostname
        if not host:
            raise BlockedURL(f"URL {url!r} has no host")
        if parts.username or parts.password:
            raise BlockedURL("URL must not carry credentials")
        port = port or (443 if parts.scheme == "https" else 80)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as error:
            raise BlockedURL(f"host {host!r} does not resolve: {error}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
        if not addresses:
            raise BlockedURL(f"host {host!r} does not resolve")
        for address in addresses:  # every one: a resolver may hand out any of them later
            try:
                self.check_address(address)
            except BlockedURL as error:
                raise BlockedURL(f"host {host!r} resolves to a blocked address: {error}") from None
        return host, port, addresses

    def check_url(self, url: str) -> None:
        """Raise :class:`BlockedURL` unless ``url`` may be requested."""
        self.resolve(url)

    # -- requests ----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        timeout_s: float = 10.0,
        max_bytes: int = 1 << 20,
        follow_redirects: bool = False,
    ) -> httpx.Response:
        """Send one request (following redirects by hand, each hop checked); body read whole.

        Raises :class:`BlockedURL` for a refused URL (also after a redirect) and
        :class:`FetchFailed` for timeouts, oversized bodies and connection errors.
        """
        deadline = time.monotonic() + timeout_s
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send_once(method, url, headers, content, deadline, max_bytes)
            location = response.headers.get("location")
            if not (follow_redirects and response.is_redirect and location):
                return response
            url = urljoin(url, location)
            if response.status_code in (301, 302, 303):
                method, content = "GET", None
        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")

    def _send_once(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        content: bytes | None,
        deadline: float,
        max_bytes: int,
    ) -> httpx.Response:
        host, port, addresses = self.resolve(url)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchFailed("time limit reached")
        parts = urlsplit(url)
        address = addresses[0]
        literal = f"[{address}]" if address.version == 6 else str(address)
        pinned = parts._replace(netloc=f"{literal}:{port}").geturl()
        host_header = host if parts.port is None else f"{host}:{port}"
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        try:
            with (
                httpx.Client(timeout=remaining, follow_redirects=False, trust_env=False) as client,
                client.stream(
                    method,
                    pinned,
                    headers={**(headers or {}), "Host": host_header},
                    content=content,
                    extensions=extensions,
                ) as response,
            ):
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise FetchFailed(f"response is larger than {max_bytes} bytes")
                    if time.monotonic() > deadline:
                        raise FetchFailed("time limit reached while reading the response")
        except httpx.TimeoutException:
            raise FetchFailed("timed out") from None
        except httpx.HTTPError as error:
            raise FetchFailed(f"{type(error).__name__}: {error}") from None
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body))

    def fetch(self, url: str, *, max_bytes: int, timeout_s: float = 10.0) -> bytes:
        """GET ``url`` (redirects followed and checked) and return its body; 2xx only."""
        response = self.request(
            "GET", url, timeout_s=timeout_s, max_bytes=max_bytes, follow_redirects=True
        )
        if not response.is_success:
            raise FetchFailed(f"GET returned HTTP {response.status_code}")
        return response.content
