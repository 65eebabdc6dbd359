"""Links found in delivered pages, for sources whose crawler only fetches what it is
given (Crawlbase's Enterprise Crawler): each in-scope URL new to the source becomes a
page and is pushed once, up to the source's ``max_pages``."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from selectolax.lexbor import LexborHTMLParser

from ingest.fetchers.kinds import fetcher_kind
from ingest.planning.recrawl import RecrawlPlan, pages_recrawl
from ingest.reading import wire
from ingest.reading.content import Content
from kbsite.canonical import link_canonical
from sources.models import Page, Source
from sources.scope import ScopeMap

# URLs looked up at once (PostgreSQL takes at most 65,535 parameters a query).
KNOWN_BATCH = 10_000
MARKDOWN_LINK = re.compile(r"\]\((<[^>]+>|[^)\s]+)")


def body_links(*, text: str, markdown: bool, base_url: str) -> list[str]:
    """Absolute http(s) URLs linked from a page, canonical, in order, once each."""
    if markdown:
        hrefs = [m.group(1).strip("<>") for m in MARKDOWN_LINK.finditer(text)]
    else:
        tree = LexborHTMLParser(text)
        hrefs = [node.attributes.get("href") or "" for node in tree.css("a[href]")]
    found = (link_canonical(base_url, href) for href in hrefs)
    return [url for url in dict.fromkeys(found) if url]


def source_links_push(*, source: Source, page: Page, content: Content) -> RecrawlPlan:
    """Pages (and pushes) for the in-scope links of ``page`` new to its source;
    none for a crawler that follows links itself."""
    if fetcher_kind(source).follows_links:
        return RecrawlPlan()
    body = wire.read_body(
        raw=content.raw_body,
        content_type=content.content_type,
        limit=settings.WEBHOOK_MAX_BODY_BYTES,
    )
    links = body_links(
        text=body.text,
        markdown=body.format == wire.BodyFormat.MARKDOWN,
        base_url=page.url,
    )
    return source_urls_push(source=source, urls=links, exclude=page.url)


def content_indexed(
    sender: type, *, source: Source, page: Page, content: Content, **kwargs: Any
) -> None:
    """The delivery job indexed new content (``ingest.delivery.job``)."""
    source_links_push(source=source, page=page, content=content)


def source_urls_push(
    *, source: Source, urls: list[str], exclude: str = ""
) -> RecrawlPlan:
    """Pages (and pushes) for the URLs that belong to the source and are no page
    yet, in order, while the source has room (``max_pages``). Known pages keep
    their own schedule."""
    scope = ScopeMap()
    wanted = [url for url in urls if url != exclude and scope.belongs_to(source, url)]
    known: set[str] = set()
    for start in range(0, len(wanted), KNOWN_BATCH):
        batch = wanted[start : start + KNOWN_BATCH]
        known.update(Page.objects.filter(url__in=batch).values_list("url", flat=True))
    room = source.max_pages - source.pages.count()
    new = [url for url in wanted if url not in known][: max(0, room)]
    if not new:
        return RecrawlPlan()
    Page.objects.bulk_create(
        [Page(source=source, url=url) for url in new], ignore_conflicts=True
    )
    return pages_recrawl(pages=Page.objects.filter(url__in=new, source=source))
