"""Why a source's crawl cannot fetch some of its seeds, known before it starts:
the same checks the crawler makes on each URL (``admission``, ``hops``,
``safety``), without fetching anything, so that the editor who saves a source
hears the reason on the next page instead of three clicks deep.

Checked: the URL parses and is http(s); it is in the source's scope; its host's
addresses pass the address guard (names are resolved here, each host once, for at
most ``seconds`` in all: a slow resolver leaves the answer to the crawl); and a
robots.txt a crawl stored within the day allows it. Anything that needs a page
fetched (a robots.txt not seen yet, an HTTP error, a site down) is the crawl's to
find and the source's overview to show.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from django.conf import settings

from ingest.crawl.robots import origin_of, robots_stored_allows
from ingest.fetchers.kinds import fetcher_kind
from ingest.fetchers.safety import (
    Refused,
    hosted_refusal,
    scheme_refusal,
    url_check,
    url_unusable,
)
from kbsite.canonical import canonical_url
from sources.models import Source
from sources.scope import ScopeMap

# Seeds checked at most (a source may list thousands; the first tell enough).
MAX_CHECKED = 50
# How long the host names may take to resolve, in all.
RESOLVE_SECONDS = 3.0


@dataclass(frozen=True)
class Refusal:
    url: str
    reason: str

    def __str__(self) -> str:
        return f"{self.url}: {self.reason}"


def source_seeds_check(
    *, source: Source, seconds: float = RESOLVE_SECONDS
) -> list[Refusal]:
    """The seeds (and sitemap) of a source crawled here that its crawl will not
    fetch, each with the crawler's reason; [] for a Crawlbase source. Resolves
    host names: call it outside any transaction."""
    kind = fetcher_kind(source)
    if not kind.crawled_here:
        return []
    urls = [(url, True) for url in source.seeds[:MAX_CHECKED]]
    if source.sitemap_url:
        urls.append((source.sitemap_url, False))
    refusals: list[Refusal] = []
    passed: list[str] = []
    scope = ScopeMap()
    for url, is_page in urls:
        try:
            canonical = canonical_url(url)
        except ValueError as exc:
            refusals.append(Refusal(url, f"it is not a usable URL: {exc}"))
            continue
        reason = _refusal_here(source, canonical, is_page=is_page, scope=scope)
        if reason:
            refusals.append(Refusal(canonical, reason))
        else:
            passed.append(canonical)
    if not kind.hosted:
        refused = _addresses_refused(passed, seconds=seconds)
        refusals += refused
        passed = [url for url in passed if url not in {r.url for r in refused}]
    if kind.obeys_robots:
        refusals += [
            Refusal(url, f"robots.txt of {origin_of(url)} disallows it")
            for url in passed
            if robots_stored_allows(url) is False
        ]
    return refusals


def _refusal_here(
    source: Source, url: str, *, is_page: bool, scope: ScopeMap
) -> str | None:
    """What the crawler refuses in the (canonical) URL itself, without the
    network."""
    unusable = url_unusable(url)
    if unusable:
        return f"it cannot be requested: {unusable}"
    refusal = scheme_refusal(url)
    if refusal:
        return refusal.rstrip(":")
    if is_page and scope.source_id_for(url) != source.pk:
        other = scope.source_for(url)
        if other is not None:
            return f"it belongs to source {other} (a longer seed prefix)"
        return "it is out of the source's scope (its deny patterns)"
    if fetcher_kind(source).hosted:
        allow = settings.CRAWL_ALLOW_PRIVATE_ADDRESSES
        return hosted_refusal(url, allow_private=allow)
    return None


def _addresses_refused(urls: list[str], *, seconds: float) -> list[Refusal]:
    """The address guard on one URL of each host, the hosts resolved at once
    (every URL of a refused host is refused); a host still resolving after
    ``seconds`` is left to the crawl."""
    first: dict[str, str] = {}
    for url in urls:
        first.setdefault(origin_of(url), url)
    if not first:
        return []
    allow = settings.CRAWL_ALLOW_PRIVATE_ADDRESSES
    pool = ThreadPoolExecutor(max_workers=min(len(first), 8))
    futures = {
        pool.submit(_guard, url, allow_private=allow): origin
        for origin, url in first.items()
    }
    done, _ = wait(futures, timeout=seconds)
    pool.shutdown(wait=False, cancel_futures=True)
    reasons = {futures[future]: future.result() for future in done}
    return [
        Refusal(url, reasons[origin_of(url)])
        for url in urls
        if reasons.get(origin_of(url))
    ]


def _guard(url: str, *, allow_private: bool) -> str:
    try:
        url_check(url, allow_private=allow_private)
    except Refused as exc:
        return str(exc)
    except ValueError as exc:  # a port out of range, and the like
        return f"it cannot be requested: {exc}"
    return ""
