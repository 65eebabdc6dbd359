"""A site crawl's sitemaps: those a host's robots.txt names, taken in on the first
hop to it, and what a sitemap lists, taken into the frontier."""

from __future__ import annotations

from dataclasses import replace

from django.db import transaction
from django.utils import timezone

from ingest.crawl import admission, results
from ingest.crawl.admission import Found
from ingest.crawl.context import Context, Reached, Stop
from ingest.crawl.models import Crawl, CrawlUrl
from kbsite.canonical import canonical_url_or_none
from kbsite.sitemaps import Entry, SitemapError, origin_sitemaps, sitemap_parse
from sources.services import pages_sitemap_dated

Result = CrawlUrl.Result


def sitemaps_discover(ctx: Context, origin: str) -> None:
    """A site crawl reads the sitemaps a robots.txt names (or, when neither it nor
    the source names one, tries /sitemap.xml once)."""
    if ctx.crawl.kind != Crawl.Kind.SITE or origin in ctx.origins_seen:
        return
    ctx.origins_seen.add(origin)
    _, text = ctx.robots.for_origin(origin)
    urls = origin_sitemaps(
        origin, text, source_names_one=bool(ctx.crawl.source.sitemap_url)
    )
    found = [Found(url, depth=0, kind=CrawlUrl.Kind.SITEMAP) for url in urls]
    admission.urls_admit(crawl=ctx.crawl, found=found, scope=ctx.scope)


def sitemap_read(ctx: Context, row: CrawlUrl, reached: Reached) -> str:
    """Take the pages and sitemaps a sitemap lists into the frontier."""
    status = reached.response.status
    if status in {404, 410}:
        raise Stop(Result.GONE, "no sitemap there", status)
    if status != 200:
        raise Stop(Result.FAILED, f"the site answered {status}", status)
    try:
        sitemap = sitemap_parse(reached.response.body)
    except SitemapError as exc:
        raise Stop(Result.FAILED, str(exc), status) from None
    found = [Found(e.url, depth=0, lastmod=e.lastmod) for e in sitemap.pages]
    found += [Found(e.url, 0, kind=CrawlUrl.Kind.SITEMAP) for e in sitemap.sitemaps]
    with transaction.atomic():
        queued = admission.urls_admit(
            crawl=ctx.crawl, found=found, scope=ctx.scope, known=ctx.known
        )
        # The pages it dates after their last check are due: the planner hands
        # those this crawl fetched before reading it back to the crawl (a
        # crawl fetches a URL once); the others it is about to fetch anyway.
        pages_sitemap_dated(
            source=ctx.crawl.source,
            entries=_canonical(sitemap.pages),
            now=timezone.now(),
        )
        note = f"{len(sitemap.pages)} pages, {len(sitemap.sitemaps)} sitemaps listed"
        results.url_finish(
            row=row,
            result=Result.FETCHED,
            site_status=status,
            error=f"{note}; {queued} new URLs queued",
        )
    return Result.FETCHED


def _canonical(entries: list[Entry]) -> list[Entry]:
    """The dated entries, under their canonical URLs (the pages' keys)."""
    found = []
    for entry in entries:
        url = canonical_url_or_none(entry.url) if entry.lastmod else None
        if url:
            found.append(replace(entry, url=url))
    return found
