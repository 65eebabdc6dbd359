"""Sending one notification once: a signed POST to a webhook, through the
crawler's address guard, or an e-mail digest through Django's mail settings. The
answer says whether it arrived and, if not, whether to try again."""

from __future__ import annotations

import smtplib
import time
from dataclasses import dataclass

import httpx2
from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection

from ingest.fetchers.http import retry_after_seconds
from ingest.fetchers.safety import Refused, guarded_transport, scheme_refusal
from ingest.notify.signing import DELIVERY_HEADER, signed_headers

# Statuses worth sending the same body again for: the receiver was busy or broke.
RETRYABLE = {408, 425, 429}
# What of the receiver's answer is kept in the log.
ANSWER_BYTES = 300


@dataclass(frozen=True)
class Attempt:
    ok: bool
    status: int | None = None
    error: str = ""
    # Worth trying again later (else the receiver refused this body for good).
    retry: bool = True
    retry_after: float | None = None
    # The address guard refused the URL: no attempt will reach it as it is.
    refused: bool = False
    duration_ms: int = 0


def _elapsed(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def user_agent() -> str:
    return f"kb-notifications/1.0 (+{settings.PUBLIC_URL})"


def webhook_post(*, url: str, secret: str, delivery_id: str, body: bytes) -> Attempt:
    """POST ``body`` to ``url``, signed, once. Redirects are not followed. The
    whole exchange (connecting, sending the body, reading the answer) ends by
    NOTIFY_TIMEOUT: a receiver that drips its answer is cut there."""
    started = time.monotonic()
    if problem := scheme_refusal(url):
        return Attempt(ok=False, error=problem, retry=False, refused=True)
    headers = signed_headers(
        secret=secret, timestamp=int(time.time()), body=body, delivery_id=delivery_id
    )
    headers["User-Agent"] = user_agent()
    timeout = settings.NOTIFY_TIMEOUT
    client = httpx2.Client(
        transport=guarded_transport(
            allow_private=settings.CRAWL_ALLOW_PRIVATE_ADDRESSES,
            deadline=started + timeout,
        ),
        timeout=httpx2.Timeout(float(timeout)),
        follow_redirects=False,
        trust_env=False,
    )
    try:
        with client.stream("POST", url, content=body, headers=headers) as answer:
            status = answer.status_code
            retry_after = retry_after_seconds(answer.headers.get("retry-after"))
            # A 2xx is the receiver's word that it has the body: what follows
            # it is not waited for.
            said = "" if 200 <= status < 300 else _answer_start(answer, timeout)
    except Refused as exc:
        return Attempt(
            ok=False, error=str(exc), retry=False, refused=True,
            duration_ms=_elapsed(started),
        )  # fmt: skip
    except httpx2.InvalidURL as exc:
        return Attempt(
            ok=False, error=f"the URL cannot be requested: {exc}"[:500],
            retry=False, refused=True, duration_ms=_elapsed(started),
        )  # fmt: skip
    except httpx2.TimeoutException:
        error = f"no answer within {timeout} s (NOTIFY_TIMEOUT, for the whole exchange)"
        return Attempt(ok=False, error=error, duration_ms=_elapsed(started))
    except httpx2.TransportError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
        return Attempt(ok=False, error=error, duration_ms=_elapsed(started))
    finally:
        client.close()
    return _judged(status, said, retry_after, _elapsed(started))


def _answer_start(answer: httpx2.Response, timeout: int) -> str:
    """The first bytes of the receiver's answer, for the log; the rest unread.
    An answer cut by the deadline, or broken off, is kept as far as it came."""
    data = b""
    ending = ""
    try:
        for chunk in answer.iter_bytes():
            data += chunk
            if len(data) >= ANSWER_BYTES:
                break
    except httpx2.TimeoutException:
        ending = f" (cut at NOTIFY_TIMEOUT, {timeout} s)"
    except httpx2.TransportError as exc:
        ending = f" (broken off: {type(exc).__name__})"
    said = " ".join(data[:ANSWER_BYTES].decode("utf-8", "replace").split())
    return (said + ending).strip()


def _judged(status: int, said: str, retry_after: float | None, ms: int) -> Attempt:
    if 200 <= status < 300:
        return Attempt(ok=True, status=status, duration_ms=ms)
    error = f"HTTP {status}" + (f": {said}" if said else "")
    if 300 <= status < 400:
        error += " (redirects are not followed: give the final URL)"
    retry = status >= 500 or status in RETRYABLE
    return Attempt(
        ok=False,
        status=status,
        error=error[:500],
        retry=retry,
        retry_after=retry_after if retry else None,
        duration_ms=ms,
    )


def email_send(
    *, addresses: list[str], subject: str, text: str, html: str, delivery_id: str
) -> Attempt:
    """The digest to each address (one message each: no one sees the others)."""
    started = time.monotonic()
    messages = []
    for address in addresses:
        message = EmailMultiAlternatives(
            subject=subject,
            body=text,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[address],
            headers={DELIVERY_HEADER: delivery_id},
        )
        message.attach_alternative(html, "text/html")
        messages.append(message)
    try:
        with get_connection() as connection:  # EMAIL_* settings, EMAIL_TIMEOUT too
            connection.send_messages(messages)
    except (smtplib.SMTPException, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
        return Attempt(ok=False, error=error, duration_ms=_elapsed(started))
    return Attempt(ok=True, duration_ms=_elapsed(started))
