"""What a fetched page ends in: one delivery through the ingest path, stored and
queued in the same transaction that marks the URL done and takes in its links, so
that a crash leaves either all of it or none."""

from __future__ import annotations

import gzip
import uuid

from django.db import transaction

from ingest.crawl import admission, results
from ingest.crawl.admission import Found
from ingest.crawl.context import Context, Reached, Stop
from ingest.crawl.models import CrawlUrl
from ingest.crawl.reading import held_links
from ingest.delivery.queue import delivery_receive
from ingest.fetchers.http import http_date, media_type_wanted
from ingest.reading import wire
from sources.models import Page

Result = CrawlUrl.Result


def page_deliver(ctx: Context, row: CrawlUrl, reached: Reached) -> str:
    """Record what the page's response ends in (a delivery, a failure, or a skip for
    noindex or an unwanted type); returns the URL's result."""
    response = reached.response
    status = response.status
    if status == 304:
        links = held_links(reached.url)
        _deliver(ctx, row, reached, result=Result.NOT_MODIFIED, links=links)
        return Result.NOT_MODIFIED
    if status in {404, 410}:
        # A page the index holds is tombstoned; a broken link makes no page.
        if not Page.objects.filter(url=reached.url).exists():
            raise Stop(Result.GONE, f"the site answered {status}", status)
        _deliver(ctx, row, reached, result=Result.GONE)
        return Result.GONE
    if status != 200:
        return url_fail(ctx, row, f"the site answered {status}", site_status=status)
    if not media_type_wanted(response.media_type, reached.url):
        raise Stop(Result.TYPE, f"content type {response.media_type}", status)
    if not reached.text.strip():
        return url_fail(ctx, row, "the page is empty", site_status=status)
    links = [] if reached.facts.nofollow else reached.facts.links
    if reached.facts.noindex:
        with transaction.atomic():
            results.url_finish(
                row=row, result=Result.ROBOTS, site_status=status, error="noindex"
            )
            _links_admit(ctx, row, links)
        return Result.ROBOTS
    _deliver(ctx, row, reached, result=Result.FETCHED, links=links)
    return Result.FETCHED


def _deliver(
    ctx: Context,
    row: CrawlUrl,
    reached: Reached,
    *,
    result: str,
    links: list[str] | None = None,
) -> int:
    response = reached.response
    content_type = ""
    if reached.text:
        kind = "html" if reached.is_html else "markdown"
        content_type = f"text/{kind}; charset=utf-8"
    body = reached.text.encode("utf-8")
    rid = f"{ctx.rid_prefix}-{uuid.uuid4().hex}"
    requested = row.url if reached.url != row.url else ""
    with transaction.atomic():
        if requested:
            _requested_page(ctx, requested)
        parsed = wire.ParsedDelivery(
            rid=rid,
            url=reached.url,
            requested_url=requested,
            original_status=response.status,
            crawler_status=200,
            body_format=wire.body_format(content_type),
            content_type=content_type,
            etag=response.etag,
            last_modified=response.last_modified,
            site_modified_at=http_date(response.last_modified) or row.lastmod,
        )
        raw = gzip.compress(body, compresslevel=5) if body else b""
        delivery_id, _ = delivery_receive(
            parsed=parsed, raw=raw, content_type=content_type
        )
        results.url_finish(
            row=row, result=result, site_status=response.status, delivery_id=delivery_id
        )
        for url in reached.chain[1:]:
            results.url_reached(
                crawl=ctx.crawl, url=url, result=result, delivery_id=delivery_id
            )
        _links_admit(ctx, row, links or [])
    return delivery_id


def _requested_page(ctx: Context, url: str) -> None:
    """The URL asked for led elsewhere: the delivery names it, and its page (made
    now if the index has none) is the one the job marks redirected to the URL
    reached. No push: nothing was sent to Crawlbase."""
    Page.objects.get_or_create(url=url, defaults={"source_id": ctx.crawl.source_id})


def _links_admit(ctx: Context, row: CrawlUrl, links: list[str]) -> None:
    if links and row.depth < ctx.crawl.max_depth:
        found = (Found(link, depth=row.depth + 1) for link in links)
        admission.urls_admit(
            crawl=ctx.crawl, found=found, scope=ctx.scope, known=ctx.known
        )


def url_fail(
    ctx: Context,
    row: CrawlUrl,
    message: str,
    *,
    site_status: int | None = None,
    crawler_status: int = 200,
) -> str:
    """The URL failed for good this time. A page the index already has records the
    failure through a delivery (its content stays); a new URL only here."""
    delivery_id = None
    with transaction.atomic():
        if Page.objects.filter(url=row.url).exists():
            parsed = wire.ParsedDelivery(
                rid=f"{ctx.rid_prefix}-{uuid.uuid4().hex}",
                url=row.url,
                original_status=site_status,
                crawler_status=crawler_status,
                body_format=wire.BodyFormat.HTML,
            )
            delivery_id, _ = delivery_receive(parsed=parsed, raw=b"", content_type="")
        results.url_finish(
            row=row,
            result=Result.FAILED,
            site_status=site_status,
            error=message,
            delivery_id=delivery_id,
        )
    return Result.FAILED
