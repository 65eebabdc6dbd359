"""HTML to Markdown: pick the main content, drop navigation, keep structure."""

from __future__ import annotations

import re

import html_to_markdown
from selectolax.lexbor import LexborHTMLParser, LexborNode

from kbsite.text import ANCHOR_ID, heading_id

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
EXTRACTOR_VERSION = "selectolax+html-to-markdown-3/3"
HEADINGS = "h1, h2, h3, h4, h5, h6"
# DocBook's boxed asides carry a heading ("Tip", "Note") that is not a section.
ADMONITION_TITLES = ", ".join(
    f".{kind} > .title"
    for kind in ["tip", "note", "warning", "caution", "important", "sidebar"]
)
# A table of contents inside a page repeats its headings as links.
TOC_CLASSES = {"toc", "list-of-tables", "list-of-figures", "list-of-examples"}
LOCAL_TOC = ", ".join(f".{name}" for name in sorted(TOC_CLASSES))
# A heading whose section element is this many levels up still owns its id
# (DocBook: div.sect2[id] > div.titlepage > div > div > h3).
ANCHOR_DEPTH = 4


def html_to_page(
    html: str | LexborHTMLParser, *, selector: str = ""
) -> tuple[str, str]:
    """The page's title and its main content as Markdown. A parsed page is read
    in place: its tree is changed."""
    tree = LexborHTMLParser(html) if isinstance(html, str) else html
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node else ""
    main = main_content(tree, selector)
    if main is None:
        return title, ""
    _terms_as_headings(main)
    _mark_heading_anchors(main)
    _demote_admonition_titles(main)
    _drop_local_toc(main)
    for node in main.css(CHROME):
        node.decompose()
    for anchor in main.css("a"):
        if anchor.text(strip=True) in PERMALINK_TEXTS:
            anchor.decompose()
    markdown = html_to_markdown.convert(main.html or "", OPTIONS).content or ""
    return title or markdown_title(markdown), markdown


def main_content(tree: LexborHTMLParser, selector: str = "") -> LexborNode | None:
    """The page's main content: the source's selector, else the first of
    DEFAULT_SELECTORS the page has."""
    for candidate in [selector, *DEFAULT_SELECTORS] if selector else DEFAULT_SELECTORS:
        main = tree.css_first(candidate)
        if main is not None:
            return main
    return None


def _terms_as_headings(main: LexborNode) -> None:
    """A definition list's terms (a setting, a function's signature, a glossary
    word) become H6 headings: they name what their description is about, for
    readers and for search, which weighs heading lines more. Tables of contents
    are lists of links, not definitions."""
    for term in main.css("dt"):
        if _in_toc(term, main):
            continue
        anchor = term.attributes.get("id") or ""
        attribute = f' id="{anchor}"' if ANCHOR_ID.match(anchor) else ""
        heading = LexborHTMLParser(
            f"<h6{attribute}>{term.inner_html or ''}</h6>"
        ).css_first("h6")
        if heading is not None and term.text(strip=True):
            term.replace_with(heading)


def _in_toc(node: LexborNode, main: LexborNode) -> bool:
    parent = node.parent
    while parent is not None and parent.mem_id != main.mem_id:
        classes = set((parent.attributes.get("class") or "").split())
        if classes & TOC_CLASSES:
            return True
        parent = parent.parent
    return False


def _mark_heading_anchors(main: LexborNode) -> None:
    """End each heading with ``{#id}`` (the Markdown attribute syntax), so chunks can
    link to their section: the heading's id, a named anchor or permalink inside it,
    or the id of the section element it heads."""
    for heading in main.css(HEADINGS):
        anchor = _heading_anchor(heading, main)
        if anchor:
            heading.insert_child(f" {{#{anchor}}}")


def _heading_anchor(heading: LexborNode, main: LexborNode) -> str:
    candidates = [heading.attributes.get("id")]
    for link in heading.css("a"):
        candidates.append(link.attributes.get("id") or link.attributes.get("name"))
        href = link.attributes.get("href") or ""
        if href.startswith("#"):
            candidates.append(href[1:])
    node = heading
    for _ in range(ANCHOR_DEPTH):
        parent = node.parent
        if parent is None or parent.mem_id == main.mem_id:
            break
        # Only the first heading of an element names it.
        first = parent.css_first(HEADINGS)
        if first is None or first.mem_id != heading.mem_id:
            break
        candidates.append(parent.attributes.get("id"))
        node = parent
    return next((c for c in candidates if c and ANCHOR_ID.match(c)), "")


def _demote_admonition_titles(main: LexborNode) -> None:
    """ "Tip", "Note" and "Warning" headings become bold lines of their box."""
    for title in main.css(ADMONITION_TITLES):
        text = title.text(strip=True)
        if title.tag in {"h1", "h2", "h3", "h4", "h5", "h6"} and text:
            bold = LexborHTMLParser("<p><strong></strong></p>").css_first("p")
            if bold is not None and bold.child is not None:
                bold.child.insert_child(text)
                title.replace_with(bold)


def _drop_local_toc(main: LexborNode) -> None:
    """A page's own table of contents goes, unless it is all the page has."""
    tocs = main.css(LOCAL_TOC)
    if not tocs:
        return
    text = main.text(strip=True)
    toc_text = sum(len(toc.text(strip=True)) for toc in tocs)
    if len(text) - toc_text > 200:
        for toc in tocs:
            toc.decompose()


def markdown_title(markdown: str) -> str:
    """The first level-one heading of a Markdown text, or ''."""
    match = H1.search(markdown)
    return heading_id(match.group(1))[0].strip() if match else ""
