"""What a fetched page says about crawling: its links, its canonical URL, and its
robots directives (``<meta name="robots">`` and the X-Robots-Tag header)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser

# Paths whose extension says they are not HTML or Markdown: never requested.
NOT_PAGES = re.compile(
    r"\.(?:pdf|png|jpe?g|gif|svg|webp|ico|bmp|tiff?|css|js|mjs|map|json|xml|rss|atom"
    r"|zip|gz|tgz|tar|bz2|xz|7z|rar|whl|egg|deb|rpm|dmg|exe|msi|iso|apk|jar"
    r"|mp3|mp4|m4a|ogg|wav|avi|mov|webm|mkv|woff2?|ttf|otf|eot|epub|docx?|xlsx?"
    r"|pptx?|odt|csv|txt)$",
    re.I,
)

# Directives written "name: value", not to be read as a crawler's name.
VALUED_DIRECTIVES = {
    "unavailable_after",
    "max-snippet",
    "max-image-preview",
    "max-video-preview",
}


@dataclass
class PageFacts:
    links: list[str] = field(default_factory=list)  # absolute, without fragments
    canonical: str = ""
    noindex: bool = False
    nofollow: bool = False


def html_facts(html: str, *, url: str, bot_name: str) -> PageFacts:
    tree = LexborHTMLParser(html)
    base = url
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        base = urljoin(url, (base_node.attributes.get("href") or "").strip())
    facts = PageFacts()
    for meta in tree.css("meta[name][content]"):
        name = (meta.attributes.get("name") or "").strip().lower()
        if name in {"robots", bot_name.lower()}:
            robots_apply(facts, meta.attributes.get("content") or "")
    for node in tree.css("link[rel][href]"):
        rels = (node.attributes.get("rel") or "").lower().split()
        if "canonical" in rels and not facts.canonical:
            facts.canonical = _absolute(base, node.attributes.get("href") or "")
    for anchor in tree.css("a[href], area[href]"):
        if "nofollow" in (anchor.attributes.get("rel") or "").lower().split():
            continue
        link = _absolute(base, anchor.attributes.get("href") or "")
        if link:
            facts.links.append(link)
    facts.links = list(dict.fromkeys(facts.links))
    return facts


def markdown_facts(markdown: str, *, url: str) -> PageFacts:
    """Links of a Markdown page: inline ``[text](target)`` links."""
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)", markdown)
    links = [link for link in (_absolute(url, t) for t in targets) if link]
    return PageFacts(links=list(dict.fromkeys(links)))


def robots_apply(facts: PageFacts, directives: str) -> None:
    """Apply a robots directive list ("noindex, nofollow", "none")."""
    words = {word.strip().lower() for word in directives.split(",")}
    facts.noindex |= bool(words & {"noindex", "none"})
    facts.nofollow |= bool(words & {"nofollow", "none"})


def header_robots(value: str, *, bot_name: str) -> PageFacts:
    """The X-Robots-Tag header: directives for every crawler ("noindex"), or for
    one named crawler ("kb-crawler: noindex"), which count only if it is this one."""
    facts = PageFacts()
    scope, colon, rest = value.partition(":")
    scope = scope.strip().lower()
    if colon and "," not in scope and scope not in VALUED_DIRECTIVES:
        if scope != bot_name.lower():
            return facts
        value = rest
    robots_apply(facts, value)
    return facts


def looks_like_page(url: str) -> bool:
    return not NOT_PAGES.search(urlsplit(url).path)


def _absolute(base: str, href: str) -> str:
    href = href.strip()
    if not href or href.startswith("#"):
        return ""
    try:
        link = urljoin(base, href)
    except ValueError:
        return ""
    if not link.lower().startswith(("http://", "https://")):
        return ""
    return link.split("#", 1)[0]
