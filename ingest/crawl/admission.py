"""Which URLs a crawl takes into its frontier: canonical, in the source's scope,
within its limits, once each (the crawl's row is locked while URLs are added, so
several workers admitting links at once keep to its page limit)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from django.db import transaction
from django.utils import timezone

from ingest.crawl import sql
from ingest.crawl.links import looks_like_page
from ingest.crawl.models import Crawl, CrawlUrl
from ingest.crawl.robots import origin_of
from ingest.fetchers.safety import scheme_refusal, url_unusable
from kbsite.canonical import canonical_url
from sources.models import Page
from sources.scope import ScopeMap

# A sitemap index may not fan out without end.
MAX_SITEMAPS = 1000


@dataclass(frozen=True)
class Found:
    url: str
    depth: int
    lastmod: datetime | None = None
    kind: str = CrawlUrl.Kind.PAGE


def urls_admit(
    *,
    crawl: Crawl,
    found: Iterable[Found],
    scope: ScopeMap,
    known: set[str] | None = None,
) -> int:
    """Take found URLs into the crawl's frontier: canonical, in the source's scope,
    within its depth and page limits, once each. Links out of scope, and paths
    that are not pages, are recorded as skipped. Returns how many were queued.

    ``known``: URLs this worker already saw in the frontier, skipped without a
    query (pages of one site link to the same pages again and again); updated."""
    known = set() if known is None else known
    rows: dict[str, CrawlUrl] = {}
    for item in found:
        url = _canonical(item.url)
        if url is None or url in known or url in rows:
            continue
        row = _row(crawl, item, url, scope)
        if row is not None:
            rows[url] = row
    if not rows:
        return 0
    with transaction.atomic():
        locked = Crawl.objects.select_for_update().filter(pk=crawl.pk).first()
        if locked is None or not locked.is_running:
            # Ended meanwhile: cancelled, or its URLs moved to a site crawl.
            return 0
        there = CrawlUrl.objects.filter(crawl=crawl, url__in=list(rows))
        present = set(there.values_list("url", flat=True))
        fresh = [row for url, row in rows.items() if url not in present]
        if crawl.kind == Crawl.Kind.PAGES:
            fresh = _new_to_source(fresh)
        queued = [r for r in fresh if r.state == CrawlUrl.State.QUEUED]
        pages = [r for r in queued if r.kind == CrawlUrl.Kind.PAGE]
        pages = pages[: _room(crawl)] if pages else []
        sitemaps = [r for r in queued if r.kind == CrawlUrl.Kind.SITEMAP]
        if sitemaps:
            sitemaps = sitemaps[: max(MAX_SITEMAPS - _sitemaps(crawl), 0)]
        skipped = [r for r in fresh if r.state == CrawlUrl.State.DONE]
        CrawlUrl.objects.bulk_create(pages + sitemaps + skipped, ignore_conflicts=True)
    # Those over the limits are known too: the frontier only grows.
    known.update(rows)
    return len(pages) + len(sitemaps)


@lru_cache(maxsize=65536)
def _canonical(url: str) -> str | None:
    try:
        canonical = canonical_url(url)
    except ValueError:
        return None
    if len(canonical) > 2048 or url_unusable(canonical) or scheme_refusal(canonical):
        return None
    return canonical


def _row(crawl: Crawl, item: Found, url: str, scope: ScopeMap) -> CrawlUrl | None:
    if item.depth > crawl.max_depth:
        return None
    row = CrawlUrl(
        crawl=crawl,
        url=url,
        origin=origin_of(url)[:300],
        kind=item.kind,
        depth=item.depth,
        lastmod=item.lastmod,
    )
    if item.kind == CrawlUrl.Kind.SITEMAP:
        return row  # the pages it lists are what the scope judges
    if scope.source_id_for(url) != crawl.source_id:
        _skip(row, CrawlUrl.Result.SCOPE, "out of the source's scope")
    elif not looks_like_page(url):
        _skip(row, CrawlUrl.Result.TYPE, "not a page, by its extension")
    return row


def _skip(row: CrawlUrl, result: str, error: str) -> None:
    row.state = CrawlUrl.State.DONE
    row.result = result
    row.error = error
    row.done_at = timezone.now()


def _new_to_source(rows: list[CrawlUrl]) -> list[CrawlUrl]:
    """A crawl of due pages follows links only to pages the source lacks."""
    links = [r.url for r in rows if r.depth > 0]
    known = set(Page.objects.filter(url__in=links).values_list("url", flat=True))
    return [r for r in rows if r.depth == 0 or r.url not in known]


def _room(crawl: Crawl) -> int:
    if crawl.kind == Crawl.Kind.PAGES:
        pages = Page.objects.filter(source_id=crawl.source_id).count()
        added = crawl.urls.admitted().filter(depth__gt=0).count()
        return max(crawl.max_pages - pages - added, 0)
    return max(crawl.max_pages - crawl.urls.admitted().count(), 0)


def _sitemaps(crawl: Crawl) -> int:
    return crawl.urls.filter(kind=CrawlUrl.Kind.SITEMAP).count()


def pages_requeue(*, crawl: Crawl, urls: list[str]) -> int:
    """Put pages into a crawl of due pages: new rows, or rows done earlier in it
    queued again. Returns how many are now queued."""
    if not urls:
        return 0
    return sql.crawl_pages_requeue(
        crawl_id=crawl.pk,
        origins={url: origin_of(url)[:300] for url in urls},
        not_before=timezone.now(),
    )
