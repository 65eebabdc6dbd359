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
A check for changes (``ingest.publish.services``) reads the sitemaps the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.db import transaction
from django.utils import timezone

from ingest.crawl.robots import origin_of
from ingest.fetchers.http import (
    MAX_REDIRECTS,
    DirectFetcher,
    Fetcher,
    FetchError,
    Response,
    get_following,
)
from ingest.planning.discovery import source_urls_push
from ingest.planning.recrawl import RecrawlPlan
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


@dataclass
class SitemapReading:
    """Where reading a source's sitemaps stands, one file at a time: the seed
    hosts whose robots.txt is still to be read, then the sitemaps still to be
    read. Plain data (``asdict`` and back), so that a reader may stop between two
    files and go on in another process, as a check for changes does in jobs of
    bounded time (``ingest.publish.services``)."""

    robots: list[str]  # origins whose robots.txt is still to be read
    queue: list[str]  # sitemaps still to be read, in order
    # No more can become pages: max_pages, past the source's pages (which may be
    # listed too).
    wanted: int
    names_one: bool  # the source names a sitemap of its own
    seen: list[str] = field(default_factory=list)
    covered: int = 0  # entries kept, at most ``wanted``
    sitemaps: int = 0  # files read
    listed: int = 0  # page URLs listed, covered or not
    errors: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, source: Source) -> SitemapReading:
        return cls(
            robots=list(dict.fromkeys(origin_of(seed) for seed in source.seeds)),
            queue=[source.sitemap_url] if source.sitemap_url else [],
            wanted=source.max_pages + source.pages.count(),
            names_one=bool(source.sitemap_url),
        )

    @property
    def done(self) -> bool:
        if self.robots:
            return False
        full = self.sitemaps >= MAX_SITEMAPS or self.covered >= self.wanted
        return full or not set(self.queue) - set(self.seen)

    def step(self, *, source: Source, fetcher: Fetcher, scope: ScopeMap) -> list[Entry]:
        """Read the next file: a robots.txt (the sitemaps it names join the
        queue) or a sitemap (the sitemaps it indexes join the queue). Returns the
        page entries the sitemap lists that the source covers, under their
        canonical URLs, once each; the caller keeps those new to it while
        ``covered`` is below ``wanted``, and counts them there."""
        if self.robots:
            origin = self.robots.pop(0)
            self.queue += _sitemaps_named(origin, fetcher, self)
            return []
        while self.queue:
            url = self.queue.pop(0)
            if url not in self.seen:
                self.seen.append(url)
                return self._sitemap_entries(source, fetcher, scope, url)
        return []

    def _sitemap_entries(
        self, source: Source, fetcher: Fetcher, scope: ScopeMap, url: str
    ) -> list[Entry]:
        sitemap = _sitemap_read(fetcher, url, self.errors)
        if sitemap is None:
            return []
        self.sitemaps += 1
        self.queue += [e.url for e in sitemap.sitemaps]
        self.listed += len(sitemap.pages)
        covered: dict[str, Entry] = {}
        for entry in sitemap.pages:
            page_url = canonical_url_or_none(entry.url)
            if page_url and page_url not in covered:
                if scope.belongs_to(source, page_url):
                    covered[page_url] = replace(entry, url=page_url)
        return list(covered.values())


def source_sitemap_urls(
    *, source: Source, fetcher: Fetcher | None = None
) -> SitemapSeeds:
    """The page URLs the source's sitemaps list that its scope covers."""
    own = fetcher or DirectFetcher()
    reading = SitemapReading.start(source)
    scope = ScopeMap()
    covered: dict[str, Entry] = {}
    try:
        while not reading.done:
            for entry in reading.step(source=source, fetcher=own, scope=scope):
                if len(covered) < reading.wanted and entry.url not in covered:
                    covered[entry.url] = entry
            reading.covered = len(covered)
    finally:
        if fetcher is None:
            own.close()
    return SitemapSeeds(
        entries=list(covered.values()),
        sitemaps=reading.sitemaps,
        listed=reading.listed,
        errors=reading.errors,
    )


def source_sitemaps_push(*, source: Source) -> tuple[SitemapSeeds, RecrawlPlan]:
    """Read the source's sitemaps and push what they list that is new to it; the
    pages they date after their last check are due now, for the planner to push."""
    seeds = source_sitemap_urls(source=source)
    with transaction.atomic():
        pages_sitemap_dated(source=source, entries=seeds.entries, now=timezone.now())
        plan = source_urls_push(source=source, urls=seeds.urls)
    return seeds, plan


def _sitemaps_named(
    origin: str, fetcher: Fetcher, reading: SitemapReading
) -> list[str]:
    response = _get(fetcher, f"{origin}/robots.txt", reading.errors)
    text = ""
    if response is not None and response.status == 200:
        text = response.body.decode("utf-8", "replace")
    return origin_sitemaps(origin, text, source_names_one=reading.names_one)


def _sitemap_read(fetcher: Fetcher, url: str, errors: list[str]) -> Sitemap | None:
    response = _get(fetcher, url, errors)
    if response is None:
        return None
    if response.status != 200:
        errors.append(f"{url}: HTTP {response.status}")
        return None
    try:
        return sitemap_parse(response.body)
    except SitemapError as error:
        errors.append(f"{url}: {error}")
        return None


def _get(fetcher: Fetcher, url: str, errors: list[str]) -> Response | None:
    """The answer at ``url`` after at most MAX_REDIRECTS redirects, or None."""
    try:
        response = get_following(fetcher, url)
    except FetchError as error:
        errors.append(f"{url}: {error}")
        return None
    if response.is_redirect and not fetcher.follows_redirects:
        errors.append(f"{url}: more than {MAX_REDIRECTS} redirects")
        return None
    return response
