"""One spelling per page: the URL a delivery is stored and looked up by.

Imports no app, so that every app can use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import unquote_plus, urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

DEFAULT_PORTS = {"http": 80, "https": 443}
# Parameters that say how a visitor arrived, never which page it is.
TRACKING_PARAMETERS = frozenset({"gclid", "fbclid"})
TRACKING_PREFIXES = ("utm_",)


def canonical_url(url: str) -> str:
    """``url`` with scheme and host in lower case, no default port, no fragment, no
    tracking parameters and the query sorted; the path keeps its case.

    Raises ``ValueError`` for a URL that has no host or cannot be parsed.
    """
    # w3lib lower-cases scheme and host, sorts the query, drops the fragment and
    # normalizes percent-encoding, but keeps default ports (its documented choice).
    parts = urlsplit(canonicalize_url(url))
    if not parts.hostname:
        raise ValueError("the URL has no host")
    netloc = parts.netloc
    if parts.port is not None and parts.port == DEFAULT_PORTS.get(parts.scheme):
        netloc = netloc.rsplit(":", 1)[0]
    query = "&".join(
        pair for pair in parts.query.split("&") if pair and not _is_tracking(pair)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@lru_cache(maxsize=32768)
def canonical_url_or_none(url: str) -> str | None:
    """``canonical_url(url)``, or None for a URL that has no host or cannot be
    parsed (``http://[::1``, a port out of range): what a site links to is not
    to be trusted to parse. Cached, as a site's pages link to the same pages
    again and again."""
    try:
        return canonical_url(url.strip())
    except ValueError:
        return None


def link_canonical(base: str, href: str) -> str | None:
    """The canonical http(s) URL an ``href`` on the page at ``base`` leads to, or
    None if it leads nowhere this product may go or cannot be parsed."""
    try:
        url = urljoin(base, href.strip())
        if urlsplit(url).scheme not in {"http", "https"}:
            return None
    except ValueError:
        return None
    return canonical_url_or_none(url)


def _is_tracking(pair: str) -> bool:
    name = unquote_plus(pair.split("=", 1)[0]).lower()
    return name in TRACKING_PARAMETERS or name.startswith(TRACKING_PREFIXES)


# What a host may be spelled with once in lower case and IDNA: names, IPv4, IPv6.
HOST_CHARACTERS = re.compile(r"^[a-z0-9.\-:]+$")


def web_origin(text: str) -> str:
    """The origin a browser names a site by (its ``Origin`` header), for one as an
    editor types it: ``HTTPS://Docs.Example.com:443/`` is
    ``https://docs.example.com``. Scheme and host in lower case (a host in
    another script in its IDNA form), the port only when it is not the scheme's
    default, and nothing after the host. Raises ``ValueError`` saying what is
    wrong."""
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError("an origin starts with https:// or http://")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("an origin is a scheme, a host and a port: no path")
    if parts.username is not None or parts.password is not None:
        raise ValueError("an origin has no user name or password")
    host = parts.hostname or ""
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    if not host or not HOST_CHARACTERS.match(host):
        raise ValueError("an origin names one host, with no wildcard")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("an origin's port is a number from 1 to 65535") from None
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def web_origins(values: Iterable[str]) -> list[str]:
    """Each of ``values`` as ``web_origin`` spells it, once, in order. Raises
    ``ValueError`` naming the first that is not an origin."""
    origins: list[str] = []
    for value in values:
        try:
            origin = web_origin(value)
        except ValueError as exc:
            raise ValueError(f"{value[:100]!r} is not an origin: {exc}") from None
        if origin not in origins:
            origins.append(origin)
    return origins
