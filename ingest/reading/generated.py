"""Pages a site generates that are not content: indexes, search pages, source code
listings, pages that ask not to be indexed, and pages that are links only.

They are crawled (their links lead to content) but kept out of answers: a Sphinx
``genindex`` page or a ``_modules`` listing holds every identifier of the site,
and took top-five places from the prose that answers (docs/quality.md). Each is
recognised by what the site's generator marks it with, or by what its text is,
never by a guess at its topic. No database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from selectolax.lexbor import LexborHTMLParser

from ingest.reading.extract import main_content


class Kind(StrEnum):
    INDEX = "index"
    SEARCH = "search"
    SOURCE_LISTING = "source listing"
    NOINDEX = "noindex"
    LINKS = "links"


@dataclass(frozen=True)
class NotContent:
    kind: Kind
    reason: str  # in plain words, for the editor


# What generators mark their generated pages with, inside the page's main content
# (a theme's header may hold a search box's results on every page): Sphinx's
# general and module indexes (split by letter or whole), DocBook's
# back-of-the-book index; Sphinx's search page, which alone loads the site's
# search index.
INDEX_MARKERS = "table.indextable, .genindex-jumpbox, div.index div.indexdiv"
SEARCH_MARKER = "#search-results"
SEARCH_INDEX = 'script[src$="searchindex.js"]'
# Sphinx's highlighted source of a module, under _modules/ ("Source code for
# package.module") and their list.
SOURCE_PATH = "_modules"
SOURCE_HEADING = re.compile(
    r"^(?:Source code for [\w.]+|All modules for which code is available)$"
)
NOINDEX = re.compile(r"\b(noindex|none)\b", re.IGNORECASE)
# A page of this much link text (and this many linked words) is a table of
# contents or a link list: its answers are on the pages it links to. Of the
# 1,836 pages of the three benchmark sites, 0.9 takes 23 contents pages (parts of
# the PostgreSQL manual, chapters of Python's library reference, both sites'
# full contents) and no page a golden set expects; below it come contents pages
# with a paragraph of prose (0.75-0.89). Python's genindex pages are 0.60-0.74
# links and go by their markers.
LINK_SHARE = 0.9
LINK_WORDS = 30
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
WORD = re.compile(r"\w+")


def page_not_content(
    *, url: str, marked: NotContent | None, markdown: str
) -> NotContent | None:
    """Why this page is not content, or None if it is: what its HTML is marked as
    (``page_marked``; None for a page delivered as Markdown), else what its URL
    and its text tell."""
    if marked is not None:
        return marked
    if SOURCE_PATH in urlsplit(url).path.split("/"):
        return NotContent(Kind.SOURCE_LISTING, "a source code listing (_modules)")
    return _links_only(markdown)


def page_marked(html: str | LexborHTMLParser, selector: str = "") -> NotContent | None:
    """What the page's generator marked it as, if anything: looked for in the
    page before it is read (reading it changes a parsed tree). ``selector`` picks
    the main content, as for reading the page."""
    tree = LexborHTMLParser(html) if isinstance(html, str) else html
    for meta in tree.css("meta[name]"):
        name = (meta.attributes.get("name") or "").lower()
        if name == "robots" and NOINDEX.search(meta.attributes.get("content") or ""):
            return NotContent(Kind.NOINDEX, "the page asks not to be indexed (noindex)")
    main = main_content(tree, selector)
    if main is None:
        return None
    if main.css_first(INDEX_MARKERS) is not None:
        return NotContent(Kind.INDEX, "a generated index of the site's terms")
    searching = main.css_first(SEARCH_MARKER) is not None
    if searching and tree.css_first(SEARCH_INDEX) is not None:
        return NotContent(Kind.SEARCH, "the site's search page")
    heading = main.css_first("h1")
    if heading is not None and SOURCE_HEADING.match(heading.text(strip=True)):
        return NotContent(Kind.SOURCE_LISTING, "a source code listing")
    return None


def _links_only(markdown: str) -> NotContent | None:
    """Words are runs of letters and digits: list bullets, table rules and link
    targets are not words."""
    words = len(WORD.findall(LINK.sub(r"\1", markdown)))
    linked = sum(len(WORD.findall(m.group(1))) for m in LINK.finditer(markdown))
    if linked >= LINK_WORDS and linked >= LINK_SHARE * words:
        share = linked / max(words, 1)
        return NotContent(Kind.LINKS, f"links only ({share:.0%} of its words)")
    return None
