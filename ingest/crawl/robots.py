"""robots.txt: fetched once a day per origin, kept on ``CrawlHost`` for every worker,
read with protego.

As RFC 9309 says: a robots.txt that answers 4xx allows everything; one that cannot
be reached (5xx, network errors) disallows everything for now, so the URL waiting
on it is tried again later. Redirects are followed, at most five. The first 500 KiB
are read, whatever CRAWL_MAX_BODY_BYTES says; a Crawl-delay (or Request-rate) over
CRAWL_MAX_DELAY is cut to it, and pauses the host.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone
from protego import Protego

from ingest.crawl import sql
from ingest.crawl.claims import host_pause
from ingest.crawl.models import CrawlHost
from ingest.fetchers.http import Fetcher, FetchError, get_following

TTL = timedelta(hours=24)
MAX_BYTES = 500 * 1024  # RFC 9309: at least 500 KiB must be read


class RobotsUnreachable(Exception):
    """robots.txt could not be read: nothing on that origin is fetched for now
    (``retryable``), or at all (it redirects to a URL that cannot be requested)."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, retryable: bool = True
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.retryable = retryable


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


class RobotsCache:
    """The rules of each origin, for one worker run (backed by ``CrawlHost``)."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher
        self.bot = settings.CRAWL_BOT_NAME
        self.rules: dict[str, tuple[Protego, str]] = {}

    def allowed(self, url: str) -> bool:
        rules, _ = self.for_origin(origin_of(url))
        return bool(rules.can_fetch(url, self.bot))

    def for_origin(self, origin: str) -> tuple[Protego, str]:
        """(parsed rules, robots.txt text) of an origin, fetched if stale."""
        if origin not in self.rules:
            text = robots_stored(origin)
            if text is None:
                text = self._fetch(origin)
            self.rules[origin] = (Protego.parse(text), text)
        return self.rules[origin]

    def _fetch(self, origin: str) -> str:
        url = origin + "/robots.txt"
        status, text = 0, ""
        try:
            response = get_following(self.fetcher, url, max_bytes=MAX_BYTES)
            status = response.status
        except FetchError as exc:
            raise RobotsUnreachable(
                f"robots.txt of {origin} cannot be read: {exc}",
                retry_after=exc.retry_after,
                retryable=exc.retryable,
            ) from None
        if status == 429 or status >= 500 or 300 <= status < 400:
            raise RobotsUnreachable(
                f"robots.txt of {origin} answered {status}",
                retry_after=response.retry_after,
            )
        if 200 <= status < 300:
            text = response.body[:MAX_BYTES].decode("utf-8", errors="replace")
        delay, rule = _delay(Protego.parse(text))
        cap = settings.CRAWL_MAX_DELAY
        host_robots_store(
            origin=origin, text=text, status=status, delay=min(delay, cap)
        )
        if delay > cap:
            reason = f"robots.txt asks for a {rule} of {delay:,.0f} s between requests"
            host_pause(origin=origin, reason=reason)
        return text


def robots_stored(origin: str) -> str | None:
    """The origin's robots.txt as a crawl stored it within the last day, or None."""
    fresh = timezone.now() - TTL
    host = CrawlHost.objects.filter(origin=origin, robots_fetched_at__gt=fresh)
    return host.values_list("robots_txt", flat=True).first()


def robots_stored_allows(url: str) -> bool | None:
    """Whether the stored robots.txt of the URL's origin lets the crawler fetch
    it; None when none is stored (nothing is fetched here)."""
    text = robots_stored(origin_of(url))
    if text is None:
        return None
    return bool(Protego.parse(text).can_fetch(url, settings.CRAWL_BOT_NAME))


def _delay(rules: Protego) -> tuple[float, str]:
    """Seconds between requests robots.txt asks for, and the rule that asks."""
    bot = settings.CRAWL_BOT_NAME
    delay, rule = float(rules.crawl_delay(bot) or 0.0), "Crawl-delay"
    rate = rules.request_rate(bot)
    if rate and rate.requests and rate.seconds / rate.requests > delay:
        delay, rule = rate.seconds / rate.requests, "Request-rate"
    return delay, rule


def host_robots_store(*, origin: str, text: str, status: int, delay: float) -> None:
    # PostgreSQL's text cannot hold a NUL, which a broken robots.txt may send.
    sql.host_robots_store(
        origin=origin,
        text=text.replace("\0", ""),
        status=status,
        fetched_at=timezone.now(),
        delay=delay,
    )
