"""HTML to Markdown: pick the main content, drop navigation, keep structure."""

from __future__ import annotations

import re

import html_to_markdown
from selectolax.lexbor import LexborHTMLParser

# Where documentation sites put their content, most specific first.
DEFAULT_SELECTORS = ["main", "[role=main]", "article", "#content", ".document", "body"]
# Chrome that is never content, wherever it appears: HTML5 landmarks, and the
# navigation blocks of the common documentation generators (DocBook, Sphinx).
CHROME = ", ".join(
    [
        "nav, header, footer, aside, script, style, noscript, form",
        "[role=navigation], [role=banner], [role=contentinfo]",
        ".navheader, .navfooter, .sphinxsidebar, .related, .headerlink",
    ]
)
# Heading anchors ("¶" in Sphinx, "#" in DocBook and others) are not content.
PERMALINK_TEXTS = {"¶", "#", "§", "🔗", "link"}
H1 = re.compile(r"^# +(.+?)\s*#*$", re.MULTILINE)
OPTIONS = html_to_markdown.ConversionOptions(extract_metadata=False)
# Stored with each page: a change here means stored pages can be re-derived.
EXTRACTOR_VERSION = "selectolax+html-to-markdown-3/1"


def html_to_page(html: str, *, selector: str = "") -> tuple[str, str]:
    """The page's title and its main content as Markdown."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node else ""
    main = None
    for candidate in [selector, *DEFAULT_SELECTORS] if selector else DEFAULT_SELECTORS:
        main = tree.css_first(candidate)
        if main is not None:
            break
    if main is None:
        return title, ""
    for node in main.css(CHROME):
        node.decompose()
    for anchor in main.css("a"):
        if anchor.text(strip=True) in PERMALINK_TEXTS:
            anchor.decompose()
    markdown = html_to_markdown.convert(main.html or "", OPTIONS).content or ""
    return title or markdown_title(markdown), markdown


def markdown_title(markdown: str) -> str:
    """The first level-one heading of a Markdown text, or ''."""
    match = H1.search(markdown)
    return match.group(1).strip() if match else ""
