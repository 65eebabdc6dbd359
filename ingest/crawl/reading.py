"""What a page says: its text decoded, and its facts (links, canonical URL,
robots directives) read from the body and the response's headers; or, for a 304,
from the copy the index holds."""

from __future__ import annotations

import codecs

from django.conf import settings
from w3lib.encoding import html_to_unicode

from ingest.crawl.context import Reached
from ingest.crawl.links import header_robots, html_facts, markdown_facts
from ingest.fetchers.http import HTML_TYPES, media_type_wanted
from ingest.reading import wire
from sources.models import Page


def page_read(reached: Reached) -> None:
    """Fill in the page's text and facts; left empty when its type is not one the
    index takes."""
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


def held_links(url: str) -> list[str]:
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
