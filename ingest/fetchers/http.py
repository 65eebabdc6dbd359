"""Fetchers: how one URL is requested. The crawl engine above them (frontier,
robots.txt, scope, politeness, deliveries) is the same for all of them.

- ``DirectFetcher`` requests the site itself, one hop at a time: redirects come back
  as 3xx responses for the engine to check (robots.txt, scope, address) and follow.
- ``NstproxyFetcher`` asks Nstproxy's crawl API, which fetches through its proxy
  network (and renders JavaScript) and follows redirects itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx2
from django.conf import settings

from ingest.fetchers.safety import guarded_transport, scheme_refusal, url_unusable

HTML_TYPES = {"text/html", "application/xhtml+xml"}
MARKDOWN_TYPES = {"text/markdown", "text/x-markdown"}
ACCEPT = "text/html,application/xhtml+xml,text/markdown;q=0.9,text/plain;q=0.5"


class FetchError(Exception):
    """The request failed before the site answered (or the hosted fetcher failed).

    ``crawler_status`` is what a delivery records as the crawler's status: 504 for a
    timeout, 502 for a connection or protocol error, the API's status otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        crawler_status: int = 502,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.crawler_status = crawler_status
        self.retry_after = retry_after


@dataclass
class Response:
    url: str
    status: int
    content_type: str = ""
    body: bytes = b""
    location: str = ""
    etag: str = ""
    last_modified: str = ""
    retry_after: float | None = None
    robots_tag: str = ""
    # Hosted fetchers may extract these themselves.
    links: list[str] | None = None
    canonical: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def media_type(self) -> str:
        return self.content_type.split(";")[0].strip().lower()

    @property
    def is_redirect(self) -> bool:
        return self.status in {301, 302, 303, 307, 308} and bool(self.location)


class Fetcher(Protocol):
    #: Whether redirects are followed by the fetcher (the engine then sees only
    #: the end of the chain) rather than returned as 3xx responses.
    follows_redirects: bool
    #: Whether a service elsewhere connects to the sites (so resolving their
    #: names here says nothing about where it connects).
    hosted: bool

    def get(
        self,
        url: str,
        *,
        etag: str = "",
        last_modified: str = "",
        raw: bool = False,
        max_bytes: int | None = None,
    ) -> Response:
        """One request. ``raw``: any content type, as bytes (robots.txt,
        sitemaps); otherwise the body is read only for HTML and Markdown.
        ``max_bytes``: the body's first bytes only, however long it is (robots.txt),
        where a body over CRAWL_MAX_BODY_BYTES is otherwise refused."""
        ...

    def close(self) -> None: ...


def media_type_wanted(media_type: str, url: str) -> bool:
    """HTML and Markdown pages; plain text only under a Markdown file name."""
    if media_type in HTML_TYPES | MARKDOWN_TYPES or not media_type:
        return True
    path = url.split("?", 1)[0].lower()
    return media_type == "text/plain" and path.endswith((".md", ".markdown"))


def http_date(value: str | None) -> datetime | None:
    """An HTTP date (Last-Modified, Retry-After) as an aware datetime; None when
    missing, malformed or without a time zone."""
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else None


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    when = http_date(value)
    return None if when is None else max(when.timestamp() - time.time(), 0.0)


# Redirects followed from one URL: for a file of the site's own (robots.txt, a
# sitemap) by ``get_following``; for a page hop by hop, each checked
# (``ingest.crawl.hops``).
MAX_REDIRECTS = 5


def get_following(
    fetcher: Fetcher, url: str, *, max_bytes: int | None = None
) -> Response:
    """The raw answer at ``url``, after at most MAX_REDIRECTS redirects: still a
    redirect if there were more. Raises FetchError (not retryable for a redirect
    to a URL that cannot be requested)."""
    for _ in range(MAX_REDIRECTS):
        response = fetcher.get(url, raw=True, max_bytes=max_bytes)
        if not response.is_redirect or fetcher.follows_redirects:
            return response
        url = _redirect_target(url, response.location)
    return fetcher.get(url, raw=True, max_bytes=max_bytes)


def _redirect_target(url: str, location: str) -> str:
    try:
        target = urljoin(url, location)
        problem = url_unusable(target) or scheme_refusal(target)
    except ValueError as exc:
        target, problem = location, str(exc)
    if problem:
        raise FetchError(
            f"redirected to {target[:200]}, which cannot be requested: {problem}",
            retryable=False,
        )
    return target


def user_agent() -> str:
    contact = settings.CRAWL_CONTACT_URL
    comment = f"; +{contact}" if contact else ""
    return f"Mozilla/5.0 (compatible; {settings.CRAWL_BOT_NAME}/1.0{comment})"


class DirectFetcher:
    follows_redirects = False
    hosted = False

    def __init__(self) -> None:
        self.timeout = float(settings.CRAWL_TIMEOUT)
        self.max_bytes = settings.CRAWL_MAX_BODY_BYTES
        self.client = httpx2.Client(
            transport=guarded_transport(
                allow_private=settings.CRAWL_ALLOW_PRIVATE_ADDRESSES
            ),
            headers={"User-Agent": user_agent(), "Accept": ACCEPT},
            timeout=httpx2.Timeout(self.timeout),
            follow_redirects=False,
            trust_env=False,
        )

    def get(
        self,
        url: str,
        *,
        etag: str = "",
        last_modified: str = "",
        raw: bool = False,
        max_bytes: int | None = None,
    ) -> Response:
        headers = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        started = time.monotonic()
        try:
            with self.client.stream("GET", url, headers=headers) as answer:
                response = self._response(url, answer)
                if answer.status_code == 200 and (
                    raw or media_type_wanted(response.media_type, url)
                ):
                    response.body = self._read(answer, started, max_bytes)
        except httpx2.InvalidURL as exc:
            raise FetchError(
                f"{url[:200]} cannot be requested: {exc}", retryable=False
            ) from None
        except httpx2.TimeoutException:
            raise FetchError(
                f"timed out after {self.timeout:.0f} s", crawler_status=504
            ) from None
        except httpx2.TransportError as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}"[:500]) from None
        return response

    def _response(self, url: str, answer: httpx2.Response) -> Response:
        headers = answer.headers
        return Response(
            url=url,
            status=answer.status_code,
            content_type=headers.get("content-type", ""),
            location=headers.get("location", ""),
            etag=headers.get("etag", "")[:200],
            last_modified=headers.get("last-modified", "")[:100],
            retry_after=retry_after_seconds(headers.get("retry-after")),
            robots_tag=", ".join(headers.get_list("x-robots-tag")),
        )

    def _read(
        self, answer: httpx2.Response, started: float, first: int | None
    ) -> bytes:
        """The body, up to the size limit (or its ``first`` bytes) and within the
        time limit overall (a server dripping bytes would otherwise never time
        out)."""
        declared = answer.headers.get("content-length", "")
        if first is None and declared.isdigit() and int(declared) > self.max_bytes:
            raise FetchError(self._too_large(), retryable=False)
        body = bytearray()
        for piece in answer.iter_bytes():
            body += piece
            if first is not None and len(body) >= first:
                return bytes(body[:first])
            if first is None and len(body) > self.max_bytes:
                raise FetchError(self._too_large(), retryable=False)
            if time.monotonic() - started > self.timeout:
                raise FetchError(
                    f"timed out after {self.timeout:.0f} s", crawler_status=504
                )
        return bytes(body)

    def _too_large(self) -> str:
        return f"the body is over CRAWL_MAX_BODY_BYTES ({self.max_bytes:,} bytes)"

    def close(self) -> None:
        self.client.close()
