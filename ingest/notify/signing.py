"""How a webhook body is signed: HMAC-SHA256, keyed with the subscription's
secret, over the timestamp, a dot and the raw body, sent as

    X-KB-Timestamp: 1767225600
    X-KB-Signature: sha256=<64 hex digits>

The timestamp is the time of the attempt, so a receiver that refuses old ones
(five minutes is usual) cannot be sent a recorded request again; the body, and
the delivery id in ``X-KB-Delivery`` and in the body, are the same on every
attempt. docs/api.md shows the receiver's side.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SECRET_PREFIX = "kbw_"
SIGNATURE_HEADER = "X-KB-Signature"
TIMESTAMP_HEADER = "X-KB-Timestamp"
DELIVERY_HEADER = "X-KB-Delivery"


def secret_new() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(*, secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def signed_headers(
    *, secret: str, timestamp: int, body: bytes, delivery_id: str
) -> dict[str, str]:
    return {
        "Content-Type": "application/json; charset=utf-8",
        DELIVERY_HEADER: delivery_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret=secret, timestamp=timestamp, body=body),
    }
