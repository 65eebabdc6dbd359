"""One spelling per page: the URL a delivery is stored and looked up by.

Imports no app, so that every app can use it.
"""

from __future__ import annotations

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
