"""Where the crawler may connect: public http(s) addresses only, unless
CRAWL_ALLOW_PRIVATE_ADDRESSES says otherwise.

The check is made on the resolved addresses at connection time, for every
connection (so every redirect hop), and the socket is opened to the address that
was checked: a name cannot resolve to a public address for the check and to a
private one for the connection.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2

SCHEMES = {"http", "https"}
METADATA = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("fd00:ec2::254"),
}

# What every refusal of a non-public address ends with: the setting that allows it.
ALLOW_HINT = "set CRAWL_ALLOW_PRIVATE_ADDRESSES=true to allow it"


class Refused(Exception):
    """The crawler will not connect there; the message says why."""


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (tests replace this function)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"{host} cannot be resolved: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def address_refusal(address: str) -> str | None:
    """What kind of non-public address this IP is ("a loopback address"), or None
    if it is public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip in METADATA:
        return "a cloud metadata address"
    for test, kind in [
        (ip.is_loopback, "a loopback"),
        (ip.is_link_local, "a link-local"),
        (ip.is_private, "a private"),
        (ip.is_multicast or ip.is_unspecified or ip.is_reserved, "a reserved"),
        (not ip.is_global, "a non-public"),
    ]:
        if test:
            return f"{kind} address"
    return None


def scheme_refusal(url: str) -> str | None:
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        return f"only http and https URLs are crawled, not {scheme or 'no scheme'}:"
    return None


def url_unusable(url: str) -> str | None:
    """Why no request can be made for ``url`` (a site's URL, so anything: it does
    not parse, has no host, or names a host the HTTP client refuses, such as
    ``http://0177.0.0.1/``), or None."""
    try:
        if not urlsplit(url).hostname:
            return "it has no host"
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL) as exc:
        return str(exc)[:300] or type(exc).__name__
    return None


def hosted_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why a hosted fetcher (one that connects from its own network, where
    resolving the name here proves nothing) is not given ``url``: a loopback name
    or a non-public address written in it; None otherwise."""
    if allow_private:
        return None
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is a loopback name; {ALLOW_HINT}"
    try:
        kind = address_refusal(host)
    except ValueError:
        return None  # a name, not an address
    return f"{host} is {kind}; {ALLOW_HINT}" if kind else None


def url_check(url: str, *, allow_private: bool) -> None:
    """Raise ``Refused`` unless ``url`` is http(s) and its host resolves to public
    addresses only (any address when ``allow_private``)."""
    refusal = scheme_refusal(url)
    if refusal:
        raise Refused(refusal)
    parts = urlsplit(url)
    if not parts.hostname:
        raise Refused(f"{url[:200]} has no host")
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    addresses_check(parts.hostname, resolve(parts.hostname, port), allow_private)


def addresses_check(host: str, addresses: Iterable[str], allow_private: bool) -> None:
    if allow_private:
        return
    for address in addresses:
        kind = address_refusal(address)
        if kind:
            where = f"{host} resolves to {address}" if host != address else host
            raise Refused(f"{where}, {kind}; {ALLOW_HINT}")


# Bytes written at once under a deadline.
WRITE_PIECE = 16_384
_TIMEOUTS = {
    "connect": httpcore2.ConnectTimeout,
    "read": httpcore2.ReadTimeout,
    "write": httpcore2.WriteTimeout,
}


def step_timeout(deadline: float, timeout: float | None, step: str) -> float:
    """The timeout for one step: ``timeout``, or less if the deadline comes
    first; the step's timeout error if it has passed."""
    seconds = deadline - time.monotonic()
    if seconds <= 0:
        raise _TIMEOUTS[step](f"the deadline passed before the {step}")
    return seconds if timeout is None else min(timeout, seconds)


class DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every read and write ends by ``deadline`` (a
    ``time.monotonic()`` value), whatever timeout each call is given: a timeout
    per call alone lets a peer that sends a byte now and then hold the exchange
    for ever."""

    def __init__(self, stream: httpcore2.NetworkStream, deadline: float) -> None:
        self.stream = stream
        self.deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, step_timeout(self.deadline, timeout, "read"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # In pieces, each given what is left: the stream gives every send() of
        # one write the same timeout again.
        for start in range(0, len(buffer), WRITE_PIECE):
            self.stream.write(
                buffer[start : start + WRITE_PIECE],
                step_timeout(self.deadline, timeout, "write"),
            )

    def close(self) -> None:
        self.stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        timeout = step_timeout(self.deadline, timeout, "connect")
        tls = self.stream.start_tls(ssl_context, server_hostname, timeout)
        return DeadlineStream(tls, self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class GuardedBackend(httpcore2.SyncBackend):
    """Opens sockets only to checked addresses; with a ``deadline``, sockets
    whose every step ends by then (``DeadlineStream``)."""

    def __init__(self, *, allow_private: bool, deadline: float | None = None) -> None:
        self.allow_private = allow_private
        self.deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        addresses = resolve(host, port)
        addresses_check(host, addresses, self.allow_private)
        if self.deadline is not None:
            timeout = step_timeout(self.deadline, timeout, "connect")
        stream = super().connect_tcp(
            addresses[0], port, timeout, local_address, socket_options
        )
        return (
            stream if self.deadline is None else DeadlineStream(stream, self.deadline)
        )


def guarded_transport(
    *, allow_private: bool, deadline: float | None = None
) -> httpx2.HTTPTransport:
    """An httpx transport whose every connection goes through ``GuardedBackend``
    (no proxy from the environment: it would be the one checked); with a
    ``deadline`` (``time.monotonic()``), every exchange ends by then."""
    transport = httpx2.HTTPTransport(trust_env=False, retries=0)
    # HTTPTransport has no parameter for the network backend; its pool is rebuilt
    # with the same defaults and the guarded backend.
    transport._pool = httpcore2.ConnectionPool(  # noqa: SLF001
        ssl_context=transport._pool._ssl_context,  # noqa: SLF001
        max_connections=100,
        max_keepalive_connections=20,
        keepalive_expiry=5.0,
        network_backend=GuardedBackend(allow_private=allow_private, deadline=deadline),
    )
    return transport
