"""A source's rules applied to a body: the content the page is read into, the key of
that reading, stored Markdown under the current boilerplate, and why content stays
out of answers. The delivery job and re-derivation read pages through these."""

from __future__ import annotations

import dataclasses
import hashlib

from django.conf import settings

from ingest.reading import generated, wire
from ingest.reading.content import (
    Content,
    content_derive,
    markdown_restrip,
    reading_mark,
)
from ingest.reading.extract import EXTRACTOR_VERSION
from sources.models import Source


def source_content(
    *, source: Source, url: str, raw: bytes, content_type: str
) -> Content:
    """The body of the page at ``url`` read under the source's rules. Raises
    ``wire.DeliveryError`` for an unreadable body, ``EmptyContent`` for an empty
    page."""
    content = content_derive(
        url=url,
        raw=raw,
        content_type=content_type,
        selector=source.content_selector,
        common=set(source.common_shapes),
        patterns=source.boilerplate_regexes,
        limit=settings.WEBHOOK_MAX_BODY_BYTES,
    )
    key = source_reading_key(source=source, url=url, raw=raw, content_type=content_type)
    return dataclasses.replace(content, reading_key=key)


def source_reading_key(
    *, source: Source, url: str, raw: bytes, content_type: str
) -> str:
    """A hash of everything ``source_content`` reads: the body, inflated (a gzip
    header's time is not content), and every rule that reads it. Reading is a
    function of these alone, so a body with the key of the page's Markdown would
    be read into that Markdown again. '' for a body that cannot be inflated."""
    limit = settings.WEBHOOK_MAX_BODY_BYTES
    try:
        body = wire.decompress(raw, content_encoding="", limit=limit)
    except wire.DeliveryError:
        return ""
    rules = (
        EXTRACTOR_VERSION,
        reading_mark(),
        url,
        content_type,
        source.content_selector,
        source.boilerplate_patterns,
        source.index_source_listings,
        sorted(source.common_shapes),
        limit,
    )
    digest = hashlib.sha256(repr(rules).encode())
    digest.update(body)
    return digest.hexdigest()


def source_restrip(*, source: Source, markdown: str) -> str:
    """Stored Markdown under the source's current boilerplate rules."""
    return markdown_restrip(
        markdown,
        common=set(source.common_shapes),
        patterns=source.boilerplate_regexes,
    )


def content_kept_out(*, content: Content, source: Source) -> str:
    """Why this content stays out of answers under the source's settings: the
    reason a generated page is not content (``ingest.reading.generated``), unless
    it is a source listing the source indexes; '' for content."""
    found = content.not_content
    if found is None:
        return ""
    if found.kind == generated.Kind.SOURCE_LISTING and source.index_source_listings:
        return ""
    return found.reason
