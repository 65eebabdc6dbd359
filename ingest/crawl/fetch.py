"""Fetching one frontier URL, start to end: the hops to where it ends
(``hops``), then one delivery through the ingest path (``delivering``) or the
sitemap read (``sitemaps``); a URL that fails for now is tried again later, with
backoff, until its retries run out. Whatever else goes wrong with one URL fails
that URL alone: the crawl goes on."""

from __future__ import annotations

import logging

from django.conf import settings

from ingest.crawl import claims, results
from ingest.crawl.context import Again, Context, Stop
from ingest.crawl.delivering import page_deliver, url_fail
from ingest.crawl.hops import url_follow
from ingest.crawl.models import CrawlUrl
from ingest.crawl.sitemaps import sitemap_read

logger = logging.getLogger(__name__)

Result = CrawlUrl.Result


def crawl_url_fetch(*, ctx: Context, row: CrawlUrl) -> str:
    """Fetch one claimed URL and record what became of it; returns its result, or
    "" when it was put back in the queue to be tried again."""
    try:
        return _fetch(ctx, row)
    except Exception as exc:
        # A bug, or a site sending what nothing foresaw: one URL must not stall
        # the crawl (left claimed, it would be taken again and again).
        logger.exception("crawl %s: fetching %s failed", ctx.crawl.pk, row.url)
        message = f"unexpected error: {type(exc).__name__}: {exc}"
        return url_fail(ctx, row, message)


def _fetch(ctx: Context, row: CrawlUrl) -> str:
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
    wait = None
    if again.after is not None:
        wait = claims.host_slow_down(
            origin=row.origin, seconds=again.after, asked_by="Retry-After"
        )
    if row.attempts <= settings.CRAWL_RETRIES:
        if wait is None:
            backoff = settings.CRAWL_RETRY_SECONDS * 2 ** (row.attempts - 1)
            wait = min(backoff, settings.CRAWL_MAX_DELAY)
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
