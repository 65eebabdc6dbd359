"""Following a frontier URL to where it ends: scope, robots.txt and the address
check on every hop; redirects (and a ``<link rel="canonical">`` within scope)
followed by hand, at most five, so that no hop escapes those checks."""

from __future__ import annotations

import time
from urllib.parse import urljoin

from django.conf import settings

from ingest.crawl import claims
from ingest.crawl.context import Again, Context, Reached, Stop
from ingest.crawl.models import CrawlUrl
from ingest.crawl.reading import page_read
from ingest.crawl.robots import RobotsUnreachable, origin_of
from ingest.crawl.sitemaps import sitemaps_discover
from ingest.fetchers.http import MAX_REDIRECTS, FetchError, Response
from ingest.fetchers.safety import (
    Refused,
    hosted_refusal,
    scheme_refusal,
    url_unusable,
)
from kbsite.canonical import canonical_url
from sources.models import Page

Result = CrawlUrl.Result


def url_follow(ctx: Context, row: CrawlUrl) -> Reached:
    """The claimed URL followed hop by hop to the response it ends in; raises Stop
    (done, nothing to deliver) or Again (to be tried later)."""
    url, chain = row.url, [row.url]
    origin = row.origin
    while True:
        _check_hop(ctx, row, url, first=len(chain) == 1)
        if origin_of(url) != origin:
            origin = origin_of(url)
            time.sleep(claims.host_turn_wait(origin=origin))
        response = _get(ctx, row, url)
        if response.is_redirect and not ctx.fetcher.follows_redirects:
            url = _hop(chain, url, response.location)
            continue
        if response.status == 429 or response.status >= 500:
            raise Again(
                f"the site answered {response.status}",
                after=response.retry_after,
                site_status=response.status,
            )
        reached = Reached(url=url, response=response, chain=chain)
        if row.kind == CrawlUrl.Kind.PAGE and response.status == 200:
            page_read(reached)
            canonical = _canonical_target(ctx, reached)
            if canonical:
                url = _hop(chain, url, canonical)
                continue
        return reached


def _check_hop(ctx: Context, row: CrawlUrl, url: str, *, first: bool) -> None:
    unusable = url_unusable(url)
    if unusable:
        where = url[:200] if first else f"redirected to {url[:200]}, which"
        raise Stop(Result.FAILED, f"{where} cannot be requested: {unusable}")
    refusal = scheme_refusal(url) or _hosted_refusal(ctx, url)
    if refusal:
        raise Stop(Result.REFUSED, refusal)
    if not first and row.kind == CrawlUrl.Kind.PAGE:
        if ctx.scope.source_id_for(url) != ctx.crawl.source_id:
            raise Stop(Result.SCOPE, f"redirected out of the source's scope, to {url}")
    try:
        allowed = ctx.robots.allowed(url)
    except RobotsUnreachable as exc:
        if not exc.retryable:
            raise Stop(Result.FAILED, str(exc)) from None
        raise Again(str(exc), after=exc.retry_after) from None
    except Refused as exc:  # robots.txt is the first request to a host
        raise Stop(Result.REFUSED, str(exc)) from None
    if not allowed:
        raise Stop(Result.ROBOTS, f"robots.txt disallows {url}")
    sitemaps_discover(ctx, origin_of(url))


def _hosted_refusal(ctx: Context, url: str) -> str | None:
    if not ctx.fetcher.hosted:
        return None
    return hosted_refusal(url, allow_private=settings.CRAWL_ALLOW_PRIVATE_ADDRESSES)


def _get(ctx: Context, row: CrawlUrl, url: str) -> Response:
    validators = None
    if row.kind == CrawlUrl.Kind.PAGE:
        live = Page.objects.filter(url=url, status=Page.Status.LIVE)
        validators = live.values_list("etag", "last_modified").first()
    etag, last_modified = validators or ("", "")
    try:
        return ctx.fetcher.get(
            url,
            etag=etag,
            last_modified=last_modified,
            raw=row.kind == CrawlUrl.Kind.SITEMAP,
        )
    except Refused as exc:
        raise Stop(Result.REFUSED, str(exc)) from None
    except FetchError as exc:
        if not exc.retryable:
            raise Stop(Result.FAILED, str(exc)) from None
        raise Again(
            str(exc), after=exc.retry_after, crawler_status=exc.crawler_status
        ) from None
    finally:
        claims.host_turn_end(origin=origin_of(url))


def _hop(chain: list[str], base: str, target: str) -> str:
    try:
        url = canonical_url(urljoin(base, target))
    except ValueError:
        message = f"redirected to an unusable URL: {target[:200]}"
        raise Stop(Result.FAILED, message) from None
    if url in chain:
        raise Stop(Result.FAILED, f"redirect loop through {url}")
    if len(chain) > MAX_REDIRECTS:
        raise Stop(Result.FAILED, f"more than {MAX_REDIRECTS} redirects")
    chain.append(url)
    return url


def _canonical_target(ctx: Context, reached: Reached) -> str:
    """The page's canonical URL when it is another page of this source."""
    if not reached.facts.canonical:
        return ""
    try:
        canonical = canonical_url(reached.facts.canonical)
    except ValueError:
        return ""
    if (
        url_unusable(canonical)
        or canonical == reached.url
        or canonical in reached.chain
    ):
        return ""
    if ctx.scope.source_id_for(canonical) != ctx.crawl.source_id:
        return ""
    return canonical
