"""Answers are Markdown; people read them as HTML, safely.

markdown-it-py with CommonMark and raw HTML off: scraped or generated text that
holds ``<script>`` is shown as text. Only http and https link targets become
links (no ``javascript:``, ``data:`` or relative ones). ``[n]`` markers in prose,
never in code, become links to the n-th citation: on the Ask page to its entry in
the page's list, in the Ask widget (another site's page) to the cited section.
One renderer for both, so that a reader sees an answer the same way in each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

MARKER = re.compile(r"\[(\d{1,3})\]")
SAFE_LINK = re.compile(r"^https?://", re.IGNORECASE)


def markdown_html(
    text: str, *, citations: int = 0, citation_urls: Sequence[str] = ()
) -> str:
    """HTML for ``text``, with markers 1 to ``citations`` linked to
    ``#citation-n``; or, given ``citation_urls``, each marker to its URL (a URL
    that is not http or https leaves its marker as text)."""
    links: list[str | None] = [f"#citation-{n}" for n in range(1, citations + 1)]
    if citation_urls:
        links = [url if _safe_link(url) else None for url in citation_urls]
    return _parser().render(text, {"links": links})


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    # CommonMark plus tables (answers quote them), raw HTML off.
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    parser.validateLink = _safe_link  # type: ignore[method-assign]
    parser.core.ruler.push("citation_markers", _link_markers)
    return parser


def _safe_link(url: str) -> bool:
    return bool(SAFE_LINK.match(url.strip()))


def _link_markers(state: StateCore) -> None:
    links: list[str | None] = state.env.get("links", [])
    if not any(links):
        return
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        children: list[Token] = []
        for token in block.children:
            children.extend(_split(token, links) if token.type == "text" else [token])
        block.children = children


def _split(token: Token, links: list[str | None]) -> list[Token]:
    """A text token, cut around its markers, each marker a link token."""
    out: list[Token] = []
    at = 0
    for match in MARKER.finditer(token.content):
        number = int(match.group(1))
        href = links[number - 1] if 1 <= number <= len(links) else None
        if href is None:
            continue
        out.append(_text(token.content[at : match.start()]))
        opening = Token("link_open", "a", 1)
        opening.attrs = {"href": href, "class": "marker"}
        out += [opening, _text(match.group(0)), Token("link_close", "a", -1)]
        at = match.end()
    out.append(_text(token.content[at:]))
    return [t for t in out if t.type != "text" or t.content]


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token
