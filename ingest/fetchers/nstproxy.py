"""Nstproxy's crawl API as a fetcher: the page is fetched by their proxy network
(JavaScript rendered) and comes back as Markdown with its links.

The wire format is an assumption, taken from Nstproxy's own Python SDK
(``nstdata-ai-crawl`` 0.1.1) and not checked against the live service:

- ``POST {NSTPROXY_API_URL}/api/v1/crawl/scrape`` with the key as a bearer token
  (``Authorization: Bearer …``; the SDK sends it as ``x-api-key``, so both are sent)
  and the JSON body ``{"url": …, "formats": ["markdown", "links"], "timeout": ms}``
  (``["rawData"]`` for robots.txt and sitemaps);
- the answer is an envelope ``{"code": 200, "err": false, "msg": …, "data": task}``
  where ``task`` is ``{"success": bool, "status": "completed" | "failed",
  "errorCode", "errorMessage", "data": {"markdown" | "markdownRef", "links",
  "rawData" | "rawDataRef", "metadata": {"statusCode", "title", "canonical"}}}``;
- a ``…Ref`` is read with ``GET {NSTPROXY_API_URL}/api/v1/crawl/storage/read?st=…``.

Redirects are followed on their side, so the engine sees only where they ended.
"""

from __future__ import annotations

from typing import Any

import httpx2
from django.conf import settings

from ingest.fetchers.http import FetchError, Response, retry_after_seconds

SCRAPE_PATH = "/api/v1/crawl/scrape"
STORAGE_PATH = "/api/v1/crawl/storage/read"
MARKDOWN = "text/markdown; charset=utf-8"


class NstproxyFetcher:
    follows_redirects = True
    hosted = True

    def __init__(self) -> None:
        key = settings.NSTPROXY_API_KEY
        if not key:
            raise FetchError(
                "NSTPROXY_API_KEY is not set", retryable=False, crawler_status=401
            )
        self.base = settings.NSTPROXY_API_URL.rstrip("/")
        self.timeout = float(settings.NSTPROXY_TIMEOUT)
        self.client = httpx2.Client(
            headers={"Authorization": f"Bearer {key}", "x-api-key": key},
            # The API waits for the page (and its JavaScript) before it answers.
            timeout=httpx2.Timeout(self.timeout + 15),
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
        formats = ["rawData"] if raw else ["markdown", "links"]
        payload = {"url": url, "formats": formats, "timeout": int(self.timeout * 1000)}
        task = self._call("POST", SCRAPE_PATH, json=payload)
        page = task.get("data") or {}
        metadata = page.get("metadata") or {}
        status = metadata.get("statusCode")
        if not isinstance(status, int):
            if task.get("success") is False or task.get("status") == "failed":
                message = task.get("errorMessage") or task.get("errorCode") or "failed"
                raise FetchError(f"Nstproxy could not fetch the page: {message}")
            status = 200
        response = Response(url=url, status=status)
        response.canonical = str(metadata.get("canonical") or "")
        if status != 200:
            return response
        field = "rawData" if raw else "markdown"
        response.body = self._content(page, field)[:max_bytes]
        response.content_type = "" if raw else MARKDOWN
        links = page.get("links")
        response.links = (
            [str(link) for link in links] if isinstance(links, list) else []
        )
        return response

    def _content(self, page: dict[str, Any], field: str) -> bytes:
        inline = page.get(field)
        if isinstance(inline, str):
            return inline.encode("utf-8")
        reference = page.get(f"{field}Ref")
        if not reference:
            return b""
        try:
            answer = self.client.get(self.base + STORAGE_PATH, params={"st": reference})
        except httpx2.HTTPError as exc:
            raise FetchError(f"Nstproxy storage: {type(exc).__name__}") from None
        self._check_status(answer)
        return answer.content

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            answer = self.client.request(method, self.base + path, **kwargs)
        except httpx2.TimeoutException:
            raise FetchError("Nstproxy timed out", crawler_status=504) from None
        except httpx2.HTTPError as exc:
            raise FetchError(f"Nstproxy: {type(exc).__name__}: {exc}"[:500]) from None
        self._check_status(answer)
        try:
            envelope = answer.json()
        except ValueError:
            raise FetchError(
                "Nstproxy answered with something other than JSON"
            ) from None
        if (
            not isinstance(envelope, dict)
            or envelope.get("err")
            or (envelope.get("code") not in (None, 200))
        ):
            message = envelope.get("msg") if isinstance(envelope, dict) else None
            raise FetchError(f"Nstproxy error: {message or 'unreadable answer'}")
        data = envelope.get("data")
        return data if isinstance(data, dict) else {}

    def _check_status(self, answer: httpx2.Response) -> None:
        status = answer.status_code
        if status in {401, 403}:
            raise FetchError(
                f"Nstproxy refused the API key ({status}): check NSTPROXY_API_KEY",
                retryable=False,
                crawler_status=status,
            )
        if status == 429 or status >= 500:
            raise FetchError(
                f"Nstproxy answered {status}",
                crawler_status=status,
                retry_after=retry_after_seconds(answer.headers.get("retry-after")),
            )
        if status >= 400:
            raise FetchError(
                f"Nstproxy answered {status}", retryable=False, crawler_status=status
            )

    def close(self) -> None:
        self.client.close()
