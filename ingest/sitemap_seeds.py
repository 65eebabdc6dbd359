"""The first URLs of a Crawlbase source from its sitemaps.

Crawlbase's Enterprise Crawler fetches only the URLs it is given, so a sitemap
(the source's own, the ``Sitemap:`` lines of each seed host's robots.txt, or
``/sitemap.xml`` when neither names one: ``origin_sitemaps``, as a site crawl reads
them) is read here, with the built-in
crawler's direct fetcher (its address guard and size limit included): sitemaps
are small XML files and robots.txt smaller still, and both are meant for bots.
Sitemap indexes are followed, at most ``MAX_SITEMAPS`` files per source. Every
listed URL the source covers becomes a page and is pushed once, up to the
source's ``max_pages``; reading stops once that many are found. A known page the
sitemap dates after its last check is due at once (``pages_sitemap_dated``).
A check for changes (``ingest.publish``) reads the sitemaps the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.db import transaction
from django.utils import timezone

from ingest.crawl.fetchers import (
    MAX_REDIRECTS,
    DirectFetcher,
    Fetcher,
    FetchError,
    Response,
    get_following,
)
from ingest.crawl.robots import origin_of
from ingest.discovery import source_urls_push
from ingest.recrawl import RecrawlPlan
from kbsite.canonical import canonical_url_or_none
from kbsite.sitemaps import (
    Entry,
    Sitemap,
    SitemapError,
    origin_sitemaps,
    sitemap_parse,
)
from sources.models import Source
from sources.scope import ScopeMap
from sources.services import pages_sitemap_dated

# Sitemap files read for one source (an index and its children count alike).
MAX_SITEMAPS = 50


@dataclass
class SitemapSeeds:
    # Listed and covered, in order, under their canonical URLs, with their lastmod.
    entries: list[Entry] = field(default_factory=list)
    sitemaps: int = 0  # files read
    listed: int = 0  # page URLs listed, covered or not
    errors: list[str] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [entry.url for entry in self.entries]

    def __str__(self) -> str:
        errors = f"; {len(self.errors)} failed: {self.errors[0]}" if self.errors else ""
        return (
            f"{self.sitemaps} sitemaps read, {self.listed} URLs listed, "
            f"{len(self.entries)} in scope{errors}"
        )


def source_sitemap_urls(
    *, source: Source, fetcher: Fetcher | None = None
) -> SitemapSeeds:
    """The page URLs the source's sitemaps list that its scope covers."""
    own = fetcher or DirectFetcher()
    found = SitemapSeeds()
    # No more can become pages: max_pages, past the source's pages (which may
    # be listed too).
    wanted = source.max_pages + source.pages.count()
    try:
        queue = _sitemaps_named(source, own, found)
        seen: set[str] = set()
        scope = ScopeMap()
        covered: dict[str, Entry] = {}
        while queue and found.sitemaps < MAX_SITEMAPS and len(covered) < wanted:
            url = queue.pop(0)
            if url in seen:
                continue
            seen.add(url)
            sitemap = _sitemap_read(own, url, found)
            if sitemap is None:
                continue
            found.sitemaps += 1
            queue += [e.url for e in sitemap.sitemaps]
            found.listed += len(sitemap.pages)
            for entry in sitemap.pages:
                page_url = canonical_url_or_none(entry.url)
                if page_url and scope.belongs_to(source, page_url):
                    if len(covered) < wanted and page_url not in covered:
                        covered[page_url] = replace(entry, url=page_url)
        found.entries = list(covered.values())
    finally:
        if fetcher is None:
            own.close()
    return found


def source_sitemaps_push(*, source: Source) -> tuple[SitemapSeeds, RecrawlPlan]:
    """Read the source's sitemaps and push what they list that is new to it; the
    pages they date after their last check are due now, for the planner to push."""
    seeds = source_sitemap_urls(source=source)
    with transaction.atomic():
        pages_sitemap_dated(source=source, entries=seeds.entries, now=timezone.now())
        plan = source_urls_push(source=source, urls=seeds.urls)
    return seeds, plan


def _sitemaps_named(source: Source, fetcher: Fetcher, found: SitemapSeeds) -> list[str]:
    named = [source.sitemap_url] if source.sitemap_url else []
    for origin in dict.fromkeys(origin_of(seed) for seed in source.seeds):
        response = _get(fetcher, f"{origin}/robots.txt", found)
        text = ""
        if response is not None and response.status == 200:
            text = response.body.decode("utf-8", "replace")
        named += origin_sitemaps(
            origin, text, source_names_one=bool(source.sitemap_url)
        )
    return list(dict.fromkeys(named))


def _sitemap_read(fetcher: Fetcher, url: str, found: SitemapSeeds) -> Sitemap | None:
    response = _get(fetcher, url, found)
    if response is None:
        return None
    if response.status != 200:
        found.errors.append(f"{url}: HTTP {response.status}")
        return None
    try:
        return sitemap_parse(response.body)
    except SitemapError as error:
        found.errors.append(f"{url}: {error}")
        return None


def _get(fetcher: Fetcher, url: str, found: SitemapSeeds) -> Response | None:
    """The answer at ``url`` after at most MAX_REDIRECTS redirects, or None."""
    try:
        response = get_following(fetcher, url)
    except FetchError as error:
        found.errors.append(f"{url}: {error}")
        return None
    if response.is_redirect and not fetcher.follows_redirects:
        found.errors.append(f"{url}: more than {MAX_REDIRECTS} redirects")
        return None
    return response
