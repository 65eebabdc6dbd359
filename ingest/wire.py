"""The Crawlbase delivery wire format: headers, compression and the three body formats.

Pure functions, no Django: the webhook uses them to validate a delivery before it is
stored, the ingest job uses them again to read the stored raw body.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

GZIP_MAGIC = b"\x1f\x8b"
PROBE_RID = "dummyrequest"
MONITOR_AGENT = "crawlbase monitoring bot"


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
    rid: str
    url: str
    original_status: int | None
    crawler_status: int | None
    body_format: str
    text: str

    @property
    def is_probe(self) -> bool:
        return self.rid == PROBE_RID


def is_probe_request(headers: dict[str, str]) -> bool:
    agent = headers.get("user-agent", "").lower()
    return headers.get("rid", "").strip() == PROBE_RID or MONITOR_AGENT in agent


def parse_status(name: str, value: str | None) -> int | None:
    """An HTTP status header; repeated copies ("200,200") must agree."""
    if value is None or not value.strip():
        return None
    parts = {part.strip() for part in value.split(",")}
    if len(parts) != 1:
        raise DeliveryError("bad_status", f"{name} has conflicting values: {value!r}")
    (part,) = parts
    if not part.isdigit() or not 100 <= int(part) <= 999:
        raise DeliveryError("bad_status", f"{name} is not an HTTP status: {value!r}")
    return int(part)


def single_value(name: str, value: str | None) -> str:
    """A header that must have one value; identical repeats joined by ',' collapse."""
    value = (value or "").strip()
    if name == "url":
        return value  # URLs may contain commas; a repeated url cannot be told apart
    parts = {part.strip() for part in value.split(",")}
    if len(parts) > 1:
        raise DeliveryError(f"bad_{name}", f"{name} has conflicting values: {value!r}")
    return parts.pop() if parts else ""


def decompress(raw: bytes, *, content_encoding: str, limit: int) -> bytes:
    """Gunzip by header or by magic bytes, refusing to inflate past ``limit``."""
    gzipped = raw[:2] == GZIP_MAGIC or "gzip" in content_encoding.lower()
    if not gzipped:
        return raw
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(raw, limit + 1)
        if len(data) > limit or inflater.unconsumed_tail:
            raise BodyTooLarge(limit)
        data += inflater.flush()
    except zlib.error as exc:
        raise DeliveryError("bad_gzip", f"body is not valid gzip: {exc}") from None
    if not inflater.eof:
        raise DeliveryError("bad_gzip", "body is truncated gzip")
    if len(data) > limit:
        raise BodyTooLarge(limit)
    return data


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
        f"content type {content_type!r} is not supported",
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
    fmt = body_format(content_type)
    text = decode_text(decompress(raw, content_encoding=content_encoding, limit=limit))
    if fmt != BodyFormat.JSON:
        return Body(format=fmt, text=text, envelope={})
    envelope = _json_envelope(text)
    inner = envelope.get("body") or ""
    if not isinstance(inner, str):
        raise DeliveryError("bad_json", "the JSON body field is not a string")
    # The JSON envelope wraps the page in whichever format the crawler produced.
    inner_format = (
        BodyFormat.MARKDOWN if _looks_like_markdown(inner) else BodyFormat.HTML
    )
    return Body(format=inner_format, text=inner, envelope=envelope)


def parse_delivery(
    *, headers: dict[str, str], raw: bytes, limit: int
) -> ParsedDelivery:
    """Validate and decode one delivery (``headers``: lower-case, hyphenated names)."""
    body = read_body(
        raw=raw,
        content_type=headers.get("content-type", ""),
        content_encoding=headers.get("content-encoding", ""),
        limit=limit,
    )
    envelope = body.envelope
    rid = single_value("rid", headers.get("rid") or _str(envelope.get("rid")))
    url = single_value("url", headers.get("url") or _str(envelope.get("url")))
    if not rid:
        raise DeliveryError("missing_rid", "the rid header is missing")
    if len(rid) > 100:
        raise DeliveryError("bad_rid", "the rid is longer than 100 characters")
    if rid != PROBE_RID:
        _check_url(url)
    original = headers.get("original-status") or _str(envelope.get("original_status"))
    crawler = (
        headers.get("pc-status")
        or headers.get("cb-status")
        or _str(envelope.get("pc_status") or envelope.get("cb_status"))
    )
    return ParsedDelivery(
        rid=rid,
        url=url,
        original_status=parse_status("Original-Status", original),
        crawler_status=parse_status("PC-Status", crawler),
        body_format=body.format,
        text=body.text,
    )


def _looks_like_markdown(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return not head.startswith(("<!doctype", "<html", "<head", "<body", "<"))


def _json_envelope(text: str) -> dict:
    try:
        envelope = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DeliveryError("bad_json", f"body is not valid JSON: {exc.msg}") from None
    if not isinstance(envelope, dict):
        raise DeliveryError("bad_json", "the JSON body is not an object")
    return envelope


def _str(value: object) -> str:
    return "" if value is None else str(value)


def _check_url(url: str) -> None:
    if not url:
        raise DeliveryError("missing_url", "the url header is missing")
    if not url.lower().startswith(("http://", "https://")) or len(url) > 2048:
        raise DeliveryError("bad_url", f"url is not an http(s) URL: {url[:200]!r}")
