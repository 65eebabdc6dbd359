"""Fetching one frontier URL, start to end: scope, robots.txt and the address
check on every hop; redirects (and a ``<link rel="canonical">`` within scope)
followed by hand, at most five; then one delivery through the ingest path, stored
and queued in the same transaction that marks the URL done and takes in its links.
"""

from __future__ import annotations

import codecs
import gzip
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from w3lib.encoding import html_to_unicode

from ingest import wire
from ingest.crawl import admission, claims, results
from ingest.crawl.admission import Found
from ingest.crawl.fetchers import (
    HTML_TYPES,
    Fetcher,
    FetchError,
    Response,
    media_type_wanted,
)
from ingest.crawl.links import PageFacts, header_robots, html_facts, markdown_facts
from ingest.crawl.robots import RobotsCache, RobotsUnreachable, origin_of
from ingest.crawl.safety import Refused, address_refusal, scheme_refusal
from ingest.models import Crawl, CrawlUrl
from ingest.queueing import delivery_receive
from kbsite.canonical import canonical_url
from kbsite.sitemaps import SitemapError, robots_sitemaps, sitemap_parse
from sources.models import Page, Push
from sources.scope import ScopeMap

MAX_REDIRECTS = 5
Result = CrawlUrl.Result


class Stop(Exception):
    """The URL is done, with this result and no delivery."""

    def __init__(self, result: str, message: str, site_status: int | None = None):
        super().__init__(message)
        self.result = result
        self.site_status = site_status


class Again(Exception):
    """Worth trying again later (a timeout, a 429, a 5xx, robots.txt unreachable)."""

    def __init__(
        self,
        message: str,
        *,
        after: float | None = None,
        site_status: int | None = None,
        crawler_status: int = 200,
    ) -> None:
        super().__init__(message)
        self.after = after
        self.site_status = site_status
        self.crawler_status = crawler_status


@dataclass
class Context:
    """What one worker run shares across the URLs it fetches."""

    crawl: Crawl
    fetcher: Fetcher
    scope: ScopeMap
    robots: RobotsCache
    rid_prefix: str
    origins_seen: set[str] = field(default_factory=set)
    known: set[str] = field(default_factory=set)  # URLs seen in the frontier


@dataclass
class Reached:
    url: str  # where the hops ended, canonical
    response: Response
    chain: list[str]  # every URL asked for, the frontier's first
    started: datetime
    text: str = ""
    is_html: bool = False
    facts: PageFacts = field(default_factory=PageFacts)


def crawl_url_fetch(*, ctx: Context, row: CrawlUrl) -> str:
    """Fetch one claimed URL and record what became of it; returns its result, or
    "" when it was put back in the queue to be tried again."""
    try:
        reached = _follow(ctx, row)
        if row.kind == CrawlUrl.Kind.SITEMAP:
            return _sitemap_read(ctx, row, reached)
        return _page_deliver(ctx, row, reached)
    except Stop as stop:
        results.url_finish(
            row=row, result=stop.result, site_status=stop.site_status, error=str(stop)
        )
        return stop.result
    except Again as again:
        return _again(ctx, row, again)


# -- the hops --------------------------------------------------------------------------


def _follow(ctx: Context, row: CrawlUrl) -> Reached:
    url, chain, started = row.url, [row.url], timezone.now()
    origin = row.origin
    while True:
        _check_hop(ctx, row, url, first=len(chain) == 1)
        if origin_of(url) != origin:
            origin = origin_of(url)
            time.sleep(claims.host_turn_wait(origin=origin))
        response = _get(ctx, row, url)
        if response.is_redirect and not ctx.fetcher.follows_redirects:
            url = _hop(chain, urljoin(url, response.location))
            continue
        if response.status == 429 or response.status >= 500:
            raise Again(
                f"the site answered {response.status}",
                after=response.retry_after,
                site_status=response.status,
            )
        reached = Reached(url=url, response=response, chain=chain, started=started)
        if row.kind == CrawlUrl.Kind.PAGE and response.status == 200:
            _read_page(ctx, reached)
            canonical = _canonical_target(ctx, reached)
            if canonical:
                url = _hop(chain, canonical)
                continue
        return reached


def _check_hop(ctx: Context, row: CrawlUrl, url: str, *, first: bool) -> None:
    refusal = scheme_refusal(url) or _hosted_refusal(ctx, url)
    if refusal:
        raise Stop(Result.REFUSED, refusal)
    if not first and row.kind == CrawlUrl.Kind.PAGE:
        if ctx.scope.source_id_for(url) != ctx.crawl.source_id:
            raise Stop(Result.SCOPE, f"redirected out of the source's scope, to {url}")
    try:
        allowed = ctx.robots.allowed(url)
    except RobotsUnreachable as exc:
        raise Again(str(exc), after=exc.retry_after) from None
    except Refused as exc:  # robots.txt is the first request to a host
        raise Stop(Result.REFUSED, str(exc)) from None
    if not allowed:
        raise Stop(Result.ROBOTS, f"robots.txt disallows {url}")
    _sitemaps_discover(ctx, origin_of(url))


def _hosted_refusal(ctx: Context, url: str) -> str | None:
    """A hosted fetcher connects from its own network, where resolving the name
    here proves nothing; addresses written in the URL are still refused."""
    if not ctx.fetcher.hosted or settings.CRAWL_ALLOW_PRIVATE_ADDRESSES:
        return None
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is a loopback name"
    try:
        kind = address_refusal(host)
    except ValueError:
        return None  # a name, not an address
    return f"{host} is {kind}" if kind else None


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


def _hop(chain: list[str], target: str) -> str:
    try:
        url = canonical_url(target)
    except ValueError:
        message = f"redirected to an unusable URL: {target[:200]}"
        raise Stop(Result.FAILED, message) from None
    if url in chain:
        raise Stop(Result.FAILED, f"redirect loop through {url}")
    if len(chain) > MAX_REDIRECTS:
        raise Stop(Result.FAILED, f"more than {MAX_REDIRECTS} redirects")
    chain.append(url)
    return url


def _read_page(ctx: Context, reached: Reached) -> None:
    response = reached.response
    if not media_type_wanted(response.media_type, reached.url):
        return
    if response.media_type in HTML_TYPES or (
        not response.media_type and response.body.lstrip()[:1] == b"<"
    ):
        _, reached.text = html_to_unicode(response.content_type, response.body)
        reached.is_html = True
        reached.facts = html_facts(
            reached.text, url=reached.url, bot_name=settings.CRAWL_BOT_NAME
        )
    else:
        charset = _charset(response.content_type)
        reached.text = response.body.decode(charset, errors="replace")
        reached.facts = markdown_facts(reached.text, url=reached.url)
    if response.links is not None:
        reached.facts.links = response.links
    reached.facts.canonical = reached.facts.canonical or response.canonical
    if response.robots_tag:
        told = header_robots(response.robots_tag, bot_name=settings.CRAWL_BOT_NAME)
        reached.facts.noindex |= told.noindex
        reached.facts.nofollow |= told.nofollow


def _charset(content_type: str) -> str:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        charset = value.strip(" \"'")
        if name.strip().lower() == "charset" and charset:
            try:
                return codecs.lookup(charset).name
            except LookupError:
                break
    return "utf-8"


def _canonical_target(ctx: Context, reached: Reached) -> str:
    """The page's canonical URL when it is another page of this source."""
    if not reached.facts.canonical:
        return ""
    try:
        canonical = canonical_url(reached.facts.canonical)
    except ValueError:
        return ""
    if canonical == reached.url or canonical in reached.chain:
        return ""
    if ctx.scope.source_id_for(canonical) != ctx.crawl.source_id:
        return ""
    return canonical


def _sitemaps_discover(ctx: Context, origin: str) -> None:
    """A site crawl reads the sitemaps a robots.txt names (or, when neither it nor
    the source names one, tries /sitemap.xml once)."""
    if ctx.crawl.kind != Crawl.Kind.SITE or origin in ctx.origins_seen:
        return
    ctx.origins_seen.add(origin)
    _, text = ctx.robots.for_origin(origin)
    urls = robots_sitemaps(text)
    if not urls and not ctx.crawl.source.sitemap_url:
        urls = [origin + "/sitemap.xml"]
    found = [Found(url, depth=0, kind=CrawlUrl.Kind.SITEMAP) for url in urls]
    admission.urls_admit(crawl=ctx.crawl, found=found, scope=ctx.scope)


# -- what a fetch ends in --------------------------------------------------------------


def _page_deliver(ctx: Context, row: CrawlUrl, reached: Reached) -> str:
    response = reached.response
    status = response.status
    if status == 304:
        links = _held_links(reached.url)
        _deliver(ctx, row, reached, result=Result.NOT_MODIFIED, links=links)
        return Result.NOT_MODIFIED
    if status in {404, 410}:
        # A page the index holds is tombstoned; a broken link makes no page.
        if not Page.objects.filter(url=reached.url).exists():
            raise Stop(Result.GONE, f"the site answered {status}", status)
        _deliver(ctx, row, reached, result=Result.GONE)
        return Result.GONE
    if status != 200:
        return _fail(ctx, row, f"the site answered {status}", site_status=status)
    if not media_type_wanted(response.media_type, reached.url):
        raise Stop(Result.TYPE, f"content type {response.media_type}", status)
    if not reached.text.strip():
        return _fail(ctx, row, "the page is empty", site_status=status)
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
    with transaction.atomic():
        if reached.url != row.url:
            _push_record(ctx, row, rid, reached.started)
        parsed = wire.ParsedDelivery(
            rid=rid,
            url=reached.url,
            original_status=response.status,
            crawler_status=200,
            body_format=wire.body_format(content_type),
            content_type=content_type,
            etag=response.etag,
            last_modified=response.last_modified,
            site_modified_at=_modified(response.last_modified) or row.lastmod,
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


def _held_links(url: str) -> list[str]:
    """A 304 has no body: the links are those of the copy the page holds, so a
    crawl of an unchanged site still finds every page."""
    held = Page.objects.filter(url=url).values_list("raw_body", "raw_content_type")
    raw, content_type = held.first() or (None, "")
    if not raw:
        return []
    try:
        body = wire.read_body(
            raw=bytes(raw),
            content_type=content_type,
            limit=settings.WEBHOOK_MAX_BODY_BYTES,
        )
    except wire.DeliveryError:
        return []
    if body.format == wire.BodyFormat.MARKDOWN:
        facts = markdown_facts(body.text, url=url)
    else:
        facts = html_facts(body.text, url=url, bot_name=settings.CRAWL_BOT_NAME)
    return [] if facts.nofollow else facts.links


def _push_record(ctx: Context, row: CrawlUrl, rid: str, started: datetime) -> None:
    """The URL asked for led elsewhere: its page, and a push naming it, let ingest
    record the redirect (the page asked for points to the one reached)."""
    page, _ = Page.objects.get_or_create(
        url=row.url, defaults={"source_id": ctx.crawl.source_id}
    )
    Push.objects.create(rid=rid, page=page, url=row.url, pushed_at=started)


def _links_admit(ctx: Context, row: CrawlUrl, links: list[str]) -> None:
    if links and row.depth < ctx.crawl.max_depth:
        found = (Found(link, depth=row.depth + 1) for link in links)
        admission.urls_admit(
            crawl=ctx.crawl, found=found, scope=ctx.scope, known=ctx.known
        )


def _modified(value: str) -> datetime | None:
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else None


def _fail(
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
    return _fail(
        ctx,
        row,
        message,
        site_status=again.site_status,
        crawler_status=again.crawler_status,
    )


def _sitemap_read(ctx: Context, row: CrawlUrl, reached: Reached) -> str:
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
        note = f"{len(sitemap.pages)} pages, {len(sitemap.sitemaps)} sitemaps listed"
        results.url_finish(
            row=row,
            result=Result.FETCHED,
            site_status=status,
            error=f"{note}; {queued} new URLs queued",
        )
    return Result.FETCHED
