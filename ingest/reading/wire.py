"""The Crawlbase delivery wire format: what is kept of a delivery, and its body's
compression, three formats and JSON envelope (its headers are read by
``ingest.delivery.headers``).

Pure functions, no Django: the webhook uses them to validate a delivery before it is
stored, the ingest job uses them again to read the stored raw body.

A NUL character is never text: PostgreSQL cannot store it, browsers drop it and
CommonMark replaces it, so it is removed wherever a delivery is read (page text,
JSON fields, header values) rather than refusing the delivery, which would only make
Crawlbase crawl the same page again and again.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kbsite import boundedjson

GZIP_MAGIC = b"\x1f\x8b"
# Unpaired surrogates: JSON can spell them ("\ud800"), UTF-8 and PostgreSQL cannot.
SURROGATE = re.compile("[\ud800-\udfff]")
# Compressed bytes handed to zlib at a time, growing from the first to the most: at
# the end of each gzip member zlib copies the rest of its input aside, so short
# slices keep a body of many small members from being copied over and over.
INFLATE_FIRST, INFLATE_MOST = 1024, 1 << 20


class DeliveryError(ValueError):
    """A delivery that cannot be accepted; ``code`` is machine-readable."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class BodyTooLarge(DeliveryError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            "body_too_large", f"body is over the {limit:,}-byte limit", 413
        )


class BodyFormat:
    HTML = "html"
    MARKDOWN = "markdown"
    JSON = "json"


@dataclass(frozen=True)
class ParsedDelivery:
    """What the webhook stores about a delivery besides its raw body."""

    rid: str
    url: str  # canonical, see kbsite.canonical
    original_status: int | None
    crawler_status: int | None
    body_format: str
    content_type: str = ""
    is_probe: bool = False
    # Only the built-in crawler knows these: the validators for its next
    # conditional request, the site's own modification time, and the URL it
    # asked for when that led to ``url``.
    etag: str = ""
    last_modified: str = ""
    site_modified_at: datetime | None = None
    requested_url: str = ""


def decompress(raw: bytes, *, content_encoding: str, limit: int) -> bytes:
    """Gunzip by header or by magic bytes: every member, refusing to inflate past
    ``limit`` in all, and refusing anything after the last member."""
    gzipped = raw[:2] == GZIP_MAGIC or "gzip" in content_encoding.lower()
    if not gzipped or not raw:
        return raw
    out, view = bytearray(), memoryview(raw)
    start = 0
    try:
        while start < len(raw):
            if start and raw[start : start + 2] != GZIP_MAGIC:
                raise DeliveryError(
                    "bad_gzip",
                    f"body has {len(raw) - start:,} bytes after the gzip stream",
                )
            start = _inflate_member(view, start, out, limit)
    except zlib.error as exc:
        raise DeliveryError("bad_gzip", f"body is not valid gzip: {exc}") from None
    return bytes(out)


def _inflate_member(raw: memoryview, start: int, out: bytearray, limit: int) -> int:
    """Inflate the gzip member at ``start`` onto ``out``; returns where it ends."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    position, size = start, INFLATE_FIRST
    while not inflater.eof:
        if position >= len(raw):
            raise DeliveryError("bad_gzip", "body is truncated gzip")
        piece = raw[position : position + size]
        # max_length is at least 1 here: 0 would mean "no limit".
        out += inflater.decompress(piece, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise BodyTooLarge(limit)
        position += len(piece)
        size = min(size * 2, INFLATE_MOST)
    return position - len(inflater.unused_data)


def body_format(content_type: str) -> str:
    kind = content_type.split(";")[0].strip().lower()
    if kind in {"gzip/json", "application/json", "text/json"}:
        return BodyFormat.JSON
    if kind in {"text/markdown", "text/x-markdown"}:
        return BodyFormat.MARKDOWN
    if kind in {"text/plain", "text/html", "application/xhtml+xml", ""}:
        return BodyFormat.HTML
    raise DeliveryError(
        "unsupported_content_type",
        f"content type {content_type[:100]!r} is not supported",
        415,
    )


def decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DeliveryError(
            "bad_encoding", f"body is not valid UTF-8 (byte {exc.start})"
        ) from None


@dataclass(frozen=True)
class Body:
    format: str
    text: str
    envelope: dict


def read_body(
    *, raw: bytes, content_type: str, limit: int, content_encoding: str = ""
) -> Body:
    """The page text of a delivery body, whatever its compression and format."""
    fmt, text = decoded(raw, content_type, content_encoding, limit)
    if fmt == BodyFormat.HTML and _says_no_format(content_type):
        # Crawlbase sends its HTML as text/plain, and may send its Markdown so:
        # read as HTML, Markdown came out with its headings escaped and no title.
        fmt = BodyFormat.MARKDOWN if _looks_like_markdown(text) else fmt
    if fmt != BodyFormat.JSON:
        return Body(format=fmt, text=text, envelope={})
    envelope = json_envelope(text)
    inner = envelope_text(envelope, "body")
    # The JSON envelope wraps the page in whichever format the crawler produced.
    inner_format = (
        BodyFormat.MARKDOWN if _looks_like_markdown(inner) else BodyFormat.HTML
    )
    return Body(format=inner_format, text=inner, envelope=envelope)


def decoded(
    raw: bytes, content_type: str, content_encoding: str, limit: int
) -> tuple[str, str]:
    """The body's format, and its text inflated and decoded without NUL."""
    fmt = body_format(content_type)
    data = decompress(raw, content_encoding=content_encoding, limit=limit)
    # In UTF-8 a zero byte is only ever U+0000; looking for it costs far less than
    # rewriting every body.
    if b"\0" in data:
        data = data.replace(b"\0", b"")
    return fmt, decode_text(data)


def _says_no_format(content_type: str) -> bool:
    """A type that names no markup: the body says which it is."""
    return content_type.split(";")[0].strip().lower() in {"text/plain", ""}


def _looks_like_markdown(text: str) -> bool:
    # A byte order mark may come before the first tag.
    head = text.lstrip().lstrip("\ufeff").lstrip()[:200].lower()
    return not head.startswith(("<!doctype", "<html", "<head", "<body", "<"))


def json_envelope(text: str) -> dict[str, Any]:
    try:
        envelope = boundedjson.loads(text)
    except boundedjson.TooDeep as exc:
        raise DeliveryError("bad_json", f"the JSON body is {exc}") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to read
        message = getattr(exc, "msg", "unreadable number")
        raise DeliveryError("bad_json", f"body is not valid JSON: {message}") from None
    if not isinstance(envelope, dict):
        raise DeliveryError("bad_json", "the JSON body is not an object")
    return envelope


def envelope_field(envelope: dict[str, Any], key: str) -> str:
    """A string field of the JSON envelope, as it came."""
    value = envelope.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DeliveryError("bad_json", f"the JSON {key} field is not a string")
    return value


def envelope_text(envelope: dict[str, Any], key: str) -> str:
    return _clean(envelope_field(envelope, key))


def envelope_status(envelope: dict[str, Any], key: str) -> str:
    value = envelope.get(key)
    if not value:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return _clean(value)
    raise DeliveryError("bad_status", f"the JSON {key} field is not an HTTP status")


def _clean(text: str) -> str:
    """Text decoded from JSON without what PostgreSQL cannot store."""
    return SURROGATE.sub("\ufffd", text.replace("\0", ""))
