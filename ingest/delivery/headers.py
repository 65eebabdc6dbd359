"""A Crawlbase delivery's identity and statuses (rid, url, Original-Status,
PC-Status), from its headers or else its JSON envelope, validated into the
``ParsedDelivery`` the webhook stores; the body is read by ``ingest.reading.wire``.

Pure functions, no Django. NUL characters are removed from header values, as from
everything else a delivery holds (see ``ingest.reading.wire``).
"""

from __future__ import annotations

import re
from typing import Any

from ingest.reading.wire import (
    BodyFormat,
    DeliveryError,
    ParsedDelivery,
    decoded,
    envelope_field,
    envelope_status,
    envelope_text,
    json_envelope,
)
from kbsite.canonical import canonical_url

PROBE_RID = "dummyrequest"
# ASCII digits only: str.isdigit() also accepts "²" (which int() refuses) and
# Arabic-Indic "٤٠٤" (which int() reads as 404).
STATUS = re.compile(r"[1-9][0-9]{2}")


def parse_status(name: str, value: str | None) -> int | None:
    """An HTTP status header; repeated copies ("200,200") must agree."""
    if value is None or not value.strip():
        return None
    parts = {part.strip() for part in value.split(",")}
    if len(parts) != 1:
        raise DeliveryError(
            "bad_status", f"{name} has conflicting values: {value[:50]!r}"
        )
    (part,) = parts
    if not STATUS.fullmatch(part):
        raise DeliveryError(
            "bad_status", f"{name} is not an HTTP status: {value[:20]!r}"
        )
    return int(part)


def single_value(name: str, value: str | None) -> str:
    """A header that must have one value; identical repeats joined by ',' collapse."""
    value = (value or "").strip()
    if name == "url":
        return value  # URLs may contain commas; a repeated url cannot be told apart
    parts = {part.strip() for part in value.split(",")}
    if len(parts) > 1:
        raise DeliveryError(
            f"bad_{name}", f"{name} has conflicting values: {value[:200]!r}"
        )
    return parts.pop() if parts else ""


def parse_delivery(
    *, headers: dict[str, str], raw: bytes, limit: int
) -> ParsedDelivery:
    """Validate one delivery (``headers``: lower-case, hyphenated names).

    The body is checked (size, gzip, UTF-8, format, JSON envelope) but its text is not
    kept: the job reads it again from the stored raw body.
    """
    headers = {name: value.replace("\0", "") for name, value in headers.items()}
    content_type = headers.get("content-type", "")
    fmt, text = decoded(raw, content_type, headers.get("content-encoding", ""), limit)
    envelope: dict[str, Any] = {}
    if fmt == BodyFormat.JSON:
        envelope = json_envelope(text)
        text = envelope_field(envelope, "body")
    rid = single_value("rid", headers.get("rid") or envelope_text(envelope, "rid"))
    url = single_value("url", headers.get("url") or envelope_text(envelope, "url"))
    # Crawlbase's monitoring probe; a real delivery has a url or a body, and is
    # never told apart by its User-Agent.
    if rid == PROBE_RID or (not url and _blank(text)):
        return ParsedDelivery(
            rid=rid,
            url="",
            original_status=None,
            crawler_status=None,
            body_format=fmt,
            content_type=content_type,
            is_probe=True,
        )
    if not rid:
        raise DeliveryError("missing_rid", "the rid header is missing")
    if len(rid) > 100:
        raise DeliveryError("bad_rid", "the rid is longer than 100 characters")
    original, crawler = _statuses(headers, envelope)
    return ParsedDelivery(
        rid=rid,
        url=_checked_url(url),
        original_status=original,
        crawler_status=crawler,
        body_format=fmt,
        content_type=content_type,
    )


def _statuses(
    headers: dict[str, str], envelope: dict[str, Any]
) -> tuple[int | None, int | None]:
    """The site's status and Crawlbase's, from the headers or else the envelope."""
    original = headers.get("original-status") or envelope_status(
        envelope, "original_status"
    )
    crawler = (
        headers.get("pc-status")
        or headers.get("cb-status")
        or envelope_status(envelope, "pc_status")
        or envelope_status(envelope, "cb_status")
    )
    return (
        parse_status("Original-Status", original),
        parse_status("PC-Status", crawler),
    )


def _blank(text: str) -> bool:
    return not text or text.isspace()


def _checked_url(url: str) -> str:
    if not url:
        raise DeliveryError("missing_url", "the url header is missing")
    if not url.lower().startswith(("http://", "https://")):
        raise DeliveryError("bad_url", f"url is not an http(s) URL: {url[:200]!r}")
    try:
        canonical = canonical_url(url) if len(url) <= 2048 else url
    except ValueError as exc:
        raise DeliveryError("bad_url", f"url is not usable ({exc})") from None
    # Checked after canonicalizing too: percent-encoding can lengthen a URL.
    if len(canonical) > 2048:
        raise DeliveryError("bad_url", "url is longer than 2,048 characters")
    return canonical
