"""From a delivered body to the Markdown that is hashed and indexed: no database.

The same function serves a new delivery and a re-derivation from a page's stored
body (after the boilerplate learned for its source changed, or the extractor did).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from ingest.reading import boilerplate, wire
from ingest.reading.extract import html_to_page, markdown_title
from ingest.reading.generated import NotContent, page_marked, page_not_content
from ingest.reading.normalize import normalize
from ingest.reading.release_notes import is_release_notes
from kbsite.patterns import Pattern
from kbsite.text import sha256_hex

# The version of what reading makes of a body: the title, the Markdown, its line
# shapes, and whether it is content or release notes. A page whose reading key was
# made under another version is read again at its next delivery. Bump it with any
# change to that output, a library upgrade's included (a comment edit is none);
# tests/ingest/reading/test_reading_golden.py fails until it is bumped and its
# fixture recorded.
# EXTRACTOR_VERSION is the other lever: every stored page derived again at once.
# 2: a body whose type names no markup (text/plain) is read as Markdown unless it
# is HTML; it was read as HTML, Markdown's headings escaped and its title lost.
READING_VERSION = 2
# Before the version, a key held a hash of the reading modules' source text and of
# the reading libraries' versions: version 1 is that hash as the code of version 1
# made it, so the pages it read keep their keys and are not all read again.
READING_VERSION_1 = "e82d9b22751368b199b3ec12ab8b9b4d0bac1a4931b55f3949c5f9dd0cbe474f"


def reading_mark() -> str:
    """What the reading version puts into a page's reading key."""
    if READING_VERSION == 1:
        return READING_VERSION_1
    return f"reading-{READING_VERSION}"


class EmptyContent(ValueError):
    """The page has no text once navigation and boilerplate are gone."""


@dataclass(frozen=True)
class Content:
    title: str
    markdown: str  # normalized, boilerplate stripped: what is hashed and indexed
    digest: str
    shapes: dict[int, str]  # the line shapes of the page before stripping
    raw_body: bytes  # gzip
    content_type: str
    # Why the page is generated rather than written (an index, a source listing),
    # if it is: crawled for its links, kept out of answers.
    not_content: NotContent | None = None
    release_notes: bool = False  # see ingest.reading.release_notes
    # The body and the rules that read it, hashed (``ingest.reading.rules``): the same
    # key means the same content without reading the body again.
    reading_key: str = ""


def content_derive(
    *,
    url: str,
    raw: bytes,
    content_type: str,
    selector: str,
    common: set[int],
    patterns: list[Pattern],
    limit: int,
) -> Content:
    """Raises ``wire.DeliveryError`` for an unreadable body, ``EmptyContent`` for an
    empty page."""
    body = wire.read_body(raw=raw, content_type=content_type, limit=limit)
    marked = None
    if body.format == wire.BodyFormat.MARKDOWN:
        title, markdown = markdown_title(body.text), body.text
    else:
        tree = LexborHTMLParser(body.text)  # parsed once, marks read first
        marked = page_marked(tree, selector)
        title, markdown = html_to_page(tree, selector=selector)
    markdown = normalize(markdown)
    shapes = boilerplate.page_shapes(markdown)
    markdown = normalize(boilerplate.strip(markdown, common=common, patterns=patterns))
    if not markdown:
        raise EmptyContent("the page has no content")
    return Content(
        title=title,
        markdown=markdown,
        digest=sha256_hex(markdown),
        shapes=shapes,
        raw_body=raw if raw[:2] == wire.GZIP_MAGIC else gzip.compress(raw),
        content_type=content_type,
        not_content=page_not_content(url=url, marked=marked, markdown=markdown),
        release_notes=is_release_notes(url=url, title=title),
    )


def markdown_restrip(
    markdown: str, *, common: set[int], patterns: list[Pattern]
) -> str:
    """Markdown derived under older rules, read under these: the same as deriving
    its body again when the rules only grew (stripping is per line)."""
    return normalize(boilerplate.strip(markdown, common=common, patterns=patterns))
