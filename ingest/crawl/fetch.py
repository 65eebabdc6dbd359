"""Fetching one frontier URL, start to end: the hops to where it ends
(``hops``), then one delivery through the ingest path (``delivering``) or the
sitemap read (``sitemaps``); a URL that fails for now is tried again later, with
backoff, until its retries run out."""

from __future__ import annotations

from django.conf import settings

from ingest.crawl import claims, results
from ingest.crawl.context import Again, Context, Stop
from ingest.crawl.delivering import page_deliver, url_fail
from ingest.crawl.hops import url_follow
from ingest.crawl.sitemaps import sitemap_read
from ingest.models import CrawlUrl

Result = CrawlUrl.Result


def crawl_url_fetch(*, ctx: Context, row: CrawlUrl) -> str:
    """Fetch one claimed URL and record what became of it; returns its result, or
    "" when it was put back in the queue to be tried again."""
    try:
        reached = url_follow(ctx, row)
        if row.kind == CrawlUrl.Kind.SITEMAP:
            return sitemap_read(ctx, row, reached)
        return page_deliver(ctx, row, reached)
    except Stop as stop:
        results.url_finish(
            row=row, result=stop.result, site_status=stop.site_status, error=str(stop)
        )
        return stop.result
    except Again as again:
        return _again(ctx, row, again)


def _again(ctx: Context, row: CrawlUrl, again: Again) -> str:
    if again.after is not None:
        claims.host_slow_down(origin=row.origin, seconds=again.after)
    if row.attempts <= settings.CRAWL_RETRIES:
        backoff = settings.CRAWL_RETRY_SECONDS * 2 ** (row.attempts - 1)
        wait = again.after if again.after is not None else backoff
        results.url_retry_later(row=row, seconds=wait, error=str(again))
        return ""
    message = f"{again} (after {row.attempts} attempts)"
    if row.kind == CrawlUrl.Kind.SITEMAP:
        results.url_finish(row=row, result=Result.FAILED, error=message)
        return Result.FAILED
    return url_fail(
        ctx,
        row,
        message,
        site_status=again.site_status,
        crawler_status=again.crawler_status,
    )
