"""Sitemaps (sitemaps.org): XML url sets, sitemap indexes, gzip, plain-text lists,
and the ``Sitemap:`` lines of robots.txt.

Pure functions on bytes, no Django and no network: the built-in crawler and the
Crawlbase side both use them. XML is read with ``lxml.etree.iterparse`` element by
element, without entities or network access, so a hostile sitemap can neither
expand nor reach anything.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from lxml import etree

GZIP_MAGIC = b"\x1f\x8b"
# The protocol's own limits: 50,000 URLs and 50 MB (uncompressed) per file.
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024
SITEMAP_LINE = re.compile(r"^[ \t]*sitemap[ \t]*:[ \t]*(\S+)", re.I | re.M)


class SitemapError(ValueError):
    """The bytes are not a sitemap that can be read."""


# A lastmod of a date alone (``2026-11-30``), which says the day, not the hour.
DAY_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Entry:
    url: str
    lastmod: datetime | None = None
    # The lastmod named a day only: read as its midnight (UTC), while the change
    # may have come at any time of that day.
    day_only: bool = False

    @property
    def changed_by(self) -> datetime | None:
        """The latest the change the lastmod dates may have come: the end of its
        day for a date alone (a page edited this afternoon with a sitemap that
        says only "today" has changed after a check this morning)."""
        if self.lastmod is None or not self.day_only:
            return self.lastmod
        return self.lastmod + timedelta(days=1)


@dataclass
class Sitemap:
    """Page URLs of a url set, or the child sitemaps of a sitemap index."""

    pages: list[Entry] = field(default_factory=list)
    sitemaps: list[Entry] = field(default_factory=list)


def sitemap_parse(data: bytes, *, limit: int = MAX_BYTES) -> Sitemap:
    """Read one sitemap file; gzip is recognised by its magic bytes. At most
    ``MAX_URLS`` entries are taken. Raises ``SitemapError``."""
    data = _gunzip(data, limit) if data[:2] == GZIP_MAGIC else data
    if len(data) > limit:
        raise SitemapError(f"the sitemap is over {limit:,} bytes")
    if data.lstrip()[:1] != b"<":
        return Sitemap(pages=list(_text_entries(data)))
    sitemap = Sitemap()
    for kind, entry in _xml_entries(data):
        target = sitemap.sitemaps if kind == "sitemap" else sitemap.pages
        target.append(entry)
        if len(sitemap.pages) + len(sitemap.sitemaps) >= MAX_URLS:
            break
    return sitemap


def robots_sitemaps(robots_txt: str) -> list[str]:
    """The ``Sitemap:`` URLs of a robots.txt, in order, without repeats."""
    found = [match.group(1) for match in SITEMAP_LINE.finditer(robots_txt)]
    return list(dict.fromkeys(url for url in found if _is_http(url)))


def origin_sitemaps(
    origin: str, robots_txt: str, *, source_names_one: bool
) -> list[str]:
    """The sitemaps to read for a site's origin: those its robots.txt names, else
    ``/sitemap.xml``, unless the source names a sitemap of its own."""
    urls = robots_sitemaps(robots_txt)
    if not urls and not source_names_one:
        urls = [origin + "/sitemap.xml"]
    return urls


def parse_lastmod(text: str) -> datetime | None:
    """A W3C datetime (``2026-11-30``, ``2026-11-30T10:00:00+01:00``, ``…Z``) as an
    aware datetime, or None when it cannot be read."""
    text = text.strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise SitemapError(f"the sitemap is not valid gzip: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise SitemapError(f"the sitemap inflates past {limit:,} bytes")
    return out


def _text_entries(data: bytes) -> Iterator[Entry]:
    text = data.decode("utf-8", errors="replace")
    urls = (line.strip() for line in text.splitlines())
    for number, url in enumerate(url for url in urls if _is_http(url)):
        if number >= MAX_URLS:
            return
        yield Entry(url)


def _xml_entries(data: bytes) -> Iterator[tuple[str, Entry]]:
    """("url" | "sitemap", entry) for each ``<url>`` or ``<sitemap>`` element,
    whatever namespace (or none) the file uses."""
    events = etree.iterparse(
        io.BytesIO(data),
        events=("end",),
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        recover=True,
    )
    try:
        for _, element in events:
            kind = etree.QName(element).localname
            if kind not in {"url", "sitemap"}:
                continue
            values = {
                etree.QName(child).localname: (child.text or "") for child in element
            }
            element.clear()
            loc = values.get("loc", "").strip()
            if _is_http(loc):
                lastmod = values.get("lastmod", "").strip()
                day_only = bool(DAY_ONLY.fullmatch(lastmod))
                yield kind, Entry(loc, parse_lastmod(lastmod), day_only=day_only)
    except etree.XMLSyntaxError as exc:
        raise SitemapError(f"the sitemap is not XML: {exc}") from None


def _is_http(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))
