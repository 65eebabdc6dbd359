"""Checks for changes: "I just published, look now", asked for by an editor in the
admin or by a CI step after a deploy, with a publish token scoped to one source.

A check reads the source's sitemaps first (as a Crawlbase source's sitemap job
does: the source's own, those its seed hosts' robots.txt names, else
``/sitemap.xml``; taking each host's turn as the crawler does), then hands the
source's pages to its crawler in this order: the pages the sitemaps date after
their last check (due now, ``pages_sitemap_dated``) and the pages they list that
the source lacks, then the rest. The built-in fetcher checks the rest by
conditional request (``If-None-Match``/``If-Modified-Since``: a 304 downloads
nothing). Crawlbase cannot ask conditionally and each push is a paid crawl: of
the rest it gets only the pages no sitemap dates, not those a sitemap dates
before their last check. Pages already on their way (a push in flight, a URL
queued in a crawl) are not handed over twice.

A request while a check of the source is still queued joins it (one queued check
per source, a partial unique index): a CI step that retries does not double the
work. The check runs as a job; its counts are on its row once it has run.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django_q.tasks import async_task

from ingest.crawl.claims import host_turn_end, host_turn_wait
from ingest.crawl.fetchers import DirectFetcher, Fetcher, FetchError, Response
from ingest.crawl.robots import origin_of
from ingest.crawl.services import page_fetch_queue
from ingest.models import Crawl, PublishCheck, PublishToken
from ingest.pushing import page_ids_push_queue
from ingest.recrawl import pushes_send_soon
from ingest.sitemap_seeds import SitemapSeeds, source_sitemap_urls
from sources.models import Caller, Page, Source
from sources.services import URL_BATCH, pages_sitemap_dated

logger = logging.getLogger(__name__)

PUBLISH_TASK = "ingest.tasks.publish_check_run_task"
# Longest wait for a host's turn before its sitemap is given up for this check
# (a host paused for a hostile Retry-After, or very busy).
TURN_WAIT_MAX = 30.0


# -- asking ------------------------------------------------------------------------


def publish_check_request(
    *,
    source: Source,
    user: Caller,
    token: PublishToken | None = None,
) -> tuple[PublishCheck, bool]:
    """Queue a check of the source for changes, unless one is queued already:
    then that one answers this request too (its count of requests goes up).
    Returns (the check, whether it was queued now). ``user`` is who asked: an
    editor, or the anonymous holder of a publish ``token``."""
    editor = user.pk if user.is_authenticated else None
    who: dict[str, Any] = {"requested_by_id": editor, "token": token}
    with transaction.atomic():
        check, created = PublishCheck.objects.get_or_create(
            source=source, state=PublishCheck.State.QUEUED, defaults=who
        )
        if created:
            transaction.on_commit(lambda: publish_check_enqueue(check=check))
        else:
            PublishCheck.objects.filter(pk=check.pk).update(requests=F("requests") + 1)
            check.refresh_from_db()
    return check, created


def publish_check_enqueue(*, check: PublishCheck) -> None:
    async_task(PUBLISH_TASK, check.pk, task_name=f"check source {check.source_id}")


# -- running -----------------------------------------------------------------------


def publish_check_run(*, check_id: int) -> str:
    """Run a queued check (or one whose run died: running for longer than a job
    may): read the sitemaps, then hand the pages over. Returns its summary."""
    now = timezone.now()
    dead = now - timedelta(seconds=settings.Q_TIMEOUT)
    runnable = Q(state=PublishCheck.State.QUEUED) | Q(
        state=PublishCheck.State.RUNNING, started_at__lt=dead
    )
    claimed = PublishCheck.objects.filter(runnable, pk=check_id).update(
        state=PublishCheck.State.RUNNING, started_at=now
    )
    if not claimed:
        return "not queued"
    check = PublishCheck.objects.select_related("source").get(pk=check_id)
    try:
        fetcher = TakingTurns(DirectFetcher())
        try:
            seeds = source_sitemap_urls(source=check.source, fetcher=fetcher)
        finally:
            fetcher.close()
        with transaction.atomic():
            _hand_over(check, seeds)
            check.state = PublishCheck.State.DONE
            check.finished_at = timezone.now()
            check.save()
    except Exception as exc:
        logger.exception("check %s of source %s failed", check.pk, check.source_id)
        PublishCheck.objects.filter(pk=check.pk).update(
            state=PublishCheck.State.FAILED,
            finished_at=timezone.now(),
            note=f"{type(exc).__name__}: {exc}"[:2000],
        )
        check.refresh_from_db()
    return check.summary()


def _hand_over(check: PublishCheck, seeds: SitemapSeeds) -> None:
    """The source's pages to its crawler: those the sitemaps date after their
    last check and new ones first, then the rest; the counts on ``check``."""
    source = check.source
    dated = pages_sitemap_dated(
        source=source, entries=seeds.entries, now=timezone.now()
    )
    new = _pages_new(source, seeds.urls)
    first = [*dated, *new]
    rest = source.pages.exclude(pk__in=first).exclude(
        status=Page.Status.GONE, next_crawl_at=None
    )
    rest = rest.order_by(F("next_crawl_at").asc(nulls_first=True), "pk")
    check.sitemaps_read, check.sitemap_urls = seeds.sitemaps, len(seeds.entries)
    check.dated, check.new_pages = len(dated), len(new)
    check.note = "; ".join(seeds.errors)[:2000]
    if source.is_crawled_here:
        others = list(rest.values_list("pk", flat=True))
        handed = page_fetch_queue(page_ids=first)
        handed += page_fetch_queue(page_ids=others)
        check.crawl = _running_crawl(source)
    else:
        # Pages a sitemap dates, but not after their last check, are not pushed.
        undated = {e.url for e in seeds.entries if e.lastmod is None}
        listed = {e.url for e in seeds.entries}
        ids_urls = list(rest.values_list("pk", "url"))
        others = [pk for pk, url in ids_urls if url not in listed or url in undated]
        check.not_pushed = len(ids_urls) - len(others)
        queued, _ = page_ids_push_queue(page_ids=first)
        more, _ = page_ids_push_queue(page_ids=others)
        handed = queued + more
        if handed:
            transaction.on_commit(pushes_send_soon)
    check.others = len(others)
    check.in_flight = len(first) + len(others) - handed


def _pages_new(source: Source, urls: list[str]) -> list[int]:
    """Pages for the listed URLs the index lacks, while the source has room
    (``max_pages``), in the sitemaps' order: their ids."""
    known: set[str] = set()
    for start in range(0, len(urls), URL_BATCH):
        batch = urls[start : start + URL_BATCH]
        known.update(Page.objects.filter(url__in=batch).values_list("url", flat=True))
    room = max(source.max_pages - source.pages.count(), 0)
    new = [url for url in urls if url not in known][:room]
    if not new:
        return []
    Page.objects.bulk_create(
        [Page(source=source, url=url) for url in new], ignore_conflicts=True
    )
    made = dict(
        Page.objects.filter(source=source, url__in=new).values_list("url", "pk")
    )
    return [made[url] for url in new if url in made]


def _running_crawl(source: Source) -> Crawl | None:
    running = Crawl.objects.filter(source=source, state=Crawl.State.RUNNING)
    return running.order_by("started_at", "pk").first()


class TakingTurns:
    """A fetcher that waits for each host's turn, as the crawl's fetch jobs do,
    so that reading a sitemap never crowds a site a crawl is fetching."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher
        self.follows_redirects = fetcher.follows_redirects
        self.hosted = fetcher.hosted

    def get(self, url: str, **options: Any) -> Response:
        origin = origin_of(url)
        wait = host_turn_wait(origin=origin)
        if wait > TURN_WAIT_MAX:
            raise FetchError(
                f"{origin} may not be asked for {wait:,.0f} s (paused or busy)",
                retryable=False,
            )
        time.sleep(wait)
        try:
            return self.fetcher.get(url, **options)
        finally:
            host_turn_end(origin=origin)

    def close(self) -> None:
        self.fetcher.close()


# -- publish tokens ----------------------------------------------------------------


def publish_token_create(
    *, source: Source, name: str, user: Caller
) -> tuple[PublishToken, str]:
    """A new token for the source: the row, and the token, to be shown once."""
    editor = user.pk if user.is_authenticated else None
    token = PublishToken(source=source, name=name, created_by_id=editor)
    key = token.key_set()
    token.save()
    return token, key


def publish_token_find(*, key: str) -> PublishToken | None:
    """The active token ``key`` is, with its source; its use is recorded. The
    lookup is by the key's SHA-256, so no comparison runs on the key itself."""
    if not key.startswith(PublishToken.PREFIX) or len(key) > 200:
        return None
    found = PublishToken.objects.select_related("source").filter(
        key_hash=PublishToken.digest(key), revoked_at=None
    )
    token = found.first()
    if token is not None:
        token.last_used_at = timezone.now()
        PublishToken.objects.filter(pk=token.pk).update(last_used_at=token.last_used_at)
    return token
