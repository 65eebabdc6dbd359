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
work. The check runs as jobs of a few seconds each, as a crawl does: each reads
sitemap files one at a time and records each as it is read (where reading
stands, and the entries so far), then queues the next; the last hands the pages
over and closes the check, in one transaction. A stopping worker so waits for
one short job, and a check whose job was lost (a crash, a worker killed) is
resumed with the running crawls (``ingest.resume``) where it stood: no file
recorded is read again, and nothing is handed over twice. Its counts are on its
row once it has run.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import Counter
from dataclasses import asdict
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.tasks import async_task

from ingest.crawl.claims import host_turn_end, host_turn_wait
from ingest.crawl.jobs import job_seconds
from ingest.crawl.models import Crawl
from ingest.crawl.robots import origin_of
from ingest.crawl.services import page_fetch_queue
from ingest.fetchers.http import DirectFetcher, Fetcher, FetchError, Response
from ingest.fetchers.kinds import fetcher_kind
from ingest.planning.recrawl import pushes_send_soon
from ingest.planning.sitemap_seeds import SitemapReading, SitemapSeeds
from ingest.publish.models import PublishCheck, PublishCheckEntry, PublishToken
from ingest.pushing.services import page_ids_push_queue
from kbsite.sitemaps import Entry
from sources.models import Caller, Page, Source
from sources.scope import ScopeMap
from sources.services import URL_BATCH, pages_sitemap_dated

logger = logging.getLogger(__name__)

PUBLISH_TASK = "ingest.tasks.publish_check_run_task"
# Longest a check's job reads (job_seconds may allow more): well inside the 20 s
# a stop of ``serve`` waits for the jobs in flight.
CHECK_JOB_SECONDS = 5.0
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


def check_seconds() -> float:
    """How long one job of a check reads before it hands over to a fresh job: a
    crawl job's time, and no more than CHECK_JOB_SECONDS, so that a stopping
    worker (``serve`` waits 20 s for its jobs) sees the job end, not killed."""
    return min(job_seconds(), CHECK_JOB_SECONDS)


def publish_check_run(*, check_id: int, seconds: float | None = None) -> str:
    """One job of a check, queued or running: read its sitemaps one file at a
    time for ``seconds`` (one file at least), each recorded as it is read, then
    queue the next job; once every file is read, hand the pages over and close
    the check. Returns its summary."""
    now = timezone.now()
    PublishCheck.objects.filter(pk=check_id, state=PublishCheck.State.QUEUED).update(
        state=PublishCheck.State.RUNNING, started_at=now
    )
    running = PublishCheck.objects.filter(pk=check_id, state=PublishCheck.State.RUNNING)
    check = running.select_related("source").first()
    if check is None:
        return "not running"
    deadline = time.monotonic() + (check_seconds() if seconds is None else seconds)
    try:
        state = _read(check, deadline)
        if state == "continues":
            publish_check_enqueue(check=check)
        elif state == "read":
            _finish(check_id=check.pk)
    except Exception as exc:
        logger.exception("check %s of source %s failed", check.pk, check.source_id)
        with transaction.atomic():
            running.update(
                state=PublishCheck.State.FAILED,
                finished_at=timezone.now(),
                note=f"{type(exc).__name__}: {exc}"[:2000],
                reading=None,
            )
            PublishCheckEntry.objects.filter(publish_check=check_id).delete()
    check.refresh_from_db()
    return check.summary()


def _read(check: PublishCheck, deadline: float) -> str:
    """Read the check's sitemaps until ``deadline``: "read" once every file is,
    "continues" if files are left, "overtaken" if another job of the check
    recorded a file first (it goes on: this one stops)."""
    fetcher = TakingTurns(DirectFetcher())
    scope = ScopeMap()
    try:
        while True:
            before = check.reading
            reading = _reading_of(check)
            if reading.done:
                return "read"
            entries = reading.step(source=check.source, fetcher=fetcher, scope=scope)
            if not _record(check, before=before, reading=reading, entries=entries):
                return "overtaken"
            if time.monotonic() >= deadline:
                return "read" if reading.done else "continues"
    finally:
        fetcher.close()


def _reading_of(check: PublishCheck) -> SitemapReading:
    if check.reading is None:
        return SitemapReading.start(check.source)
    # A copy: reading goes on in its lists, while the row's stay as recorded.
    return SitemapReading(**copy.deepcopy(check.reading))


def _record(
    check: PublishCheck,
    *,
    before: dict[str, Any] | None,
    reading: SitemapReading,
    entries: list[Entry],
) -> bool:
    """Keep the file just read: its entries new to the check (while it has room)
    and where reading stands, together, unless the check is no longer running or
    another job recorded a file since ``before``. Whether it was kept."""
    with transaction.atomic():
        row = (
            PublishCheck.objects.select_for_update()
            .filter(pk=check.pk, state=PublishCheck.State.RUNNING)
            .values("reading")
            .first()
        )
        if row is None or row["reading"] != before:
            return False
        _entries_keep(check, reading, entries)
        check.reading = asdict(reading)
        check.sitemaps_read, check.sitemap_urls = reading.sitemaps, reading.covered
        PublishCheck.objects.filter(pk=check.pk).update(
            reading=check.reading,
            sitemaps_read=check.sitemaps_read,
            sitemap_urls=check.sitemap_urls,
        )
    return True


def _entries_keep(
    check: PublishCheck, reading: SitemapReading, entries: list[Entry]
) -> None:
    urls = [entry.url for entry in entries]
    known: set[str] = set()
    for start in range(0, len(urls), URL_BATCH):
        batch = urls[start : start + URL_BATCH]
        known.update(check.entries.filter(url__in=batch).values_list("url", flat=True))
    room = max(reading.wanted - reading.covered, 0)
    new = [entry for entry in entries if entry.url not in known][:room]
    PublishCheckEntry.objects.bulk_create(
        PublishCheckEntry(
            publish_check=check,
            position=reading.covered + n,
            url=entry.url,
            lastmod=entry.lastmod,
            day_only=entry.day_only,
        )
        for n, entry in enumerate(new)
    )
    reading.covered += len(new)


def _finish(*, check_id: int) -> None:
    """Every sitemap read: the pages to the crawler and the check closed, in one
    transaction, once (a second job finds the check no longer running)."""
    with transaction.atomic():
        running = PublishCheck.objects.select_for_update(of=("self",))
        check = (
            running.select_related("source")
            .filter(pk=check_id, state=PublishCheck.State.RUNNING)
            .first()
        )
        if check is None:
            return
        reading = _reading_of(check)
        rows = check.entries.order_by("position")
        entries = [
            Entry(url=row.url, lastmod=row.lastmod, day_only=row.day_only)
            for row in rows.only("url", "lastmod", "day_only")
        ]
        seeds = SitemapSeeds(
            entries=entries,
            sitemaps=reading.sitemaps,
            listed=reading.listed,
            errors=reading.errors,
        )
        _hand_over(check, seeds)
        check.state = PublishCheck.State.DONE
        check.finished_at = timezone.now()
        check.reading = None
        check.save()
        check.entries.all().delete()


def publish_checks_resume() -> int:
    """Queue a job for each check queued or running that has none on the queue
    (lost to a crash, to a worker killed at a stop, or to a purge), with the
    checks' rows locked, so that processes resuming together take turns and
    each counts the jobs the one before it queued. A job a killed worker had
    taken counts until the queue offers it again (Q_RETRY). Returns how many
    were queued."""
    waiting = [PublishCheck.State.QUEUED, PublishCheck.State.RUNNING]
    with transaction.atomic():
        pending = list(
            PublishCheck.objects.select_for_update()
            .filter(state__in=waiting)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if not pending:
            return 0
        queued = _jobs_queued()
        lost = [pk for pk in pending if not queued[pk]]
        for pk in lost:
            async_task(PUBLISH_TASK, pk, task_name=f"check {pk} resumed")
    return len(lost)


def _jobs_queued() -> Counter[int]:
    jobs: Counter[int] = Counter()
    for row in OrmQ.objects.filter(key=get_broker().list_key).iterator():
        task = row.task
        if isinstance(task, dict) and task.get("func") == PUBLISH_TASK and task["args"]:
            jobs[task["args"][0]] += 1
    return jobs


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
    kind = fetcher_kind(source)
    if kind.crawled_here:
        others = list(rest.values_list("pk", flat=True))
        handed = page_fetch_queue(page_ids=first)
        handed += page_fetch_queue(page_ids=others)
        check.crawl = _running_crawl(source)
    else:
        # Paid pushes: pages a sitemap dates, but not after their last check, are
        # not pushed.
        undated = {e.url for e in seeds.entries if e.lastmod is None}
        listed = {e.url for e in seeds.entries}
        ids_urls = list(rest.values_list("pk", "url"))
        others = [
            pk
            for pk, url in ids_urls
            if not kind.paid_pushes or url not in listed or url in undated
        ]
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
