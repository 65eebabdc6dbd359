"""The frontier: which URLs a crawl takes in, which one a worker fetches next, and
what became of each. Every step is a claim in the database, so several workers (and
a worker started again after a crash) share one crawl without fetching a URL twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, Min, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ingest.crawl.links import looks_like_page
from ingest.crawl.robots import origin_of
from ingest.crawl.safety import scheme_refusal
from ingest.models import Crawl, CrawlHost, CrawlUrl
from kbsite.canonical import canonical_url
from sources.models import Page
from sources.scope import ScopeMap

# A sitemap index may not fan out without end.
MAX_SITEMAPS = 1000
# A worker waits at most this long for a host's turn, rather than take another URL.
MAX_WAIT = 10.0


def lease() -> timedelta:
    """How long a claimed URL belongs to its worker: a job runs at most Q_TIMEOUT
    seconds, so a claim older than that was left by a worker that died."""
    return timedelta(seconds=settings.Q_TIMEOUT)


@dataclass(frozen=True)
class Found:
    url: str
    depth: int
    lastmod: datetime | None = None
    kind: str = CrawlUrl.Kind.PAGE


def urls_admit(
    *,
    crawl: Crawl,
    found: Iterable[Found],
    scope: ScopeMap,
    known: set[str] | None = None,
) -> int:
    """Take found URLs into the crawl's frontier: canonical, in the source's scope,
    within its depth and page limits, once each. Links out of scope, and paths
    that are not pages, are recorded as skipped. Returns how many were queued.

    ``known``: URLs this worker already saw in the frontier, skipped without a
    query (pages of one site link to the same pages again and again); updated."""
    known = set() if known is None else known
    rows: dict[str, CrawlUrl] = {}
    for item in found:
        url = _canonical(item.url)
        if url is None or url in known or url in rows:
            continue
        row = _row(crawl, item, url, scope)
        if row is not None:
            rows[url] = row
    if not rows:
        return 0
    with transaction.atomic():
        Crawl.objects.select_for_update().filter(pk=crawl.pk).first()
        there = CrawlUrl.objects.filter(crawl=crawl, url__in=list(rows))
        present = set(there.values_list("url", flat=True))
        fresh = [row for url, row in rows.items() if url not in present]
        if crawl.kind == Crawl.Kind.PAGES:
            fresh = _new_to_source(fresh)
        queued = [r for r in fresh if r.state == CrawlUrl.State.QUEUED]
        pages = [r for r in queued if r.kind == CrawlUrl.Kind.PAGE]
        pages = pages[: _room(crawl)] if pages else []
        sitemaps = [r for r in queued if r.kind == CrawlUrl.Kind.SITEMAP]
        if sitemaps:
            sitemaps = sitemaps[: max(MAX_SITEMAPS - _sitemaps(crawl), 0)]
        skipped = [r for r in fresh if r.state == CrawlUrl.State.DONE]
        CrawlUrl.objects.bulk_create(pages + sitemaps + skipped, ignore_conflicts=True)
    # Those over the limits are known too: the frontier only grows.
    known.update(rows)
    return len(pages) + len(sitemaps)


@lru_cache(maxsize=65536)
def _canonical(url: str) -> str | None:
    try:
        canonical = canonical_url(url)
    except ValueError:
        return None
    if len(canonical) > 2048 or scheme_refusal(canonical):
        return None
    return canonical


def _row(crawl: Crawl, item: Found, url: str, scope: ScopeMap) -> CrawlUrl | None:
    if item.depth > crawl.max_depth:
        return None
    row = CrawlUrl(
        crawl=crawl,
        url=url,
        origin=origin_of(url)[:300],
        kind=item.kind,
        depth=item.depth,
        lastmod=item.lastmod,
    )
    if item.kind == CrawlUrl.Kind.SITEMAP:
        return row  # the pages it lists are what the scope judges
    if scope.source_id_for(url) != crawl.source_id:
        _skip(row, CrawlUrl.Result.SCOPE, "out of the source's scope")
    elif not looks_like_page(url):
        _skip(row, CrawlUrl.Result.TYPE, "not a page, by its extension")
    return row


def _skip(row: CrawlUrl, result: str, error: str) -> None:
    row.state = CrawlUrl.State.DONE
    row.result = result
    row.error = error
    row.done_at = timezone.now()


def _new_to_source(rows: list[CrawlUrl]) -> list[CrawlUrl]:
    """A crawl of due pages follows links only to pages the source lacks."""
    links = [r.url for r in rows if r.depth > 0]
    known = set(Page.objects.filter(url__in=links).values_list("url", flat=True))
    return [r for r in rows if r.depth == 0 or r.url not in known]


def _room(crawl: Crawl) -> int:
    if crawl.kind == Crawl.Kind.PAGES:
        pages = Page.objects.filter(source_id=crawl.source_id).count()
        added = crawl.urls.admitted().filter(depth__gt=0).count()
        return max(crawl.max_pages - pages - added, 0)
    return max(crawl.max_pages - crawl.urls.admitted().count(), 0)


def _sitemaps(crawl: Crawl) -> int:
    return crawl.urls.filter(kind=CrawlUrl.Kind.SITEMAP).count()


def pages_requeue(*, crawl: Crawl, urls: list[str]) -> int:
    """Put pages into a crawl of due pages: new rows, or rows done earlier in it
    queued again. Returns how many are now queued."""
    if not urls:
        return 0
    now = timezone.now()
    table = CrawlUrl._meta.db_table
    values = ", ".join(["(%s, %s, %s, 'page', 0, 'queued', '', '', 0, %s)"] * len(urls))
    params: list[int | str | datetime] = []
    for url in urls:
        params += [crawl.pk, url, origin_of(url)[:300], now]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (crawl_id, url, origin, kind, depth, state, result, "
            f"error, attempts, not_before) VALUES {values} "
            "ON CONFLICT (crawl_id, url) DO UPDATE SET state = 'queued', result = '', "
            "error = '', attempts = 0, not_before = EXCLUDED.not_before, "
            "done_at = NULL, delivery_id = NULL "
            f"WHERE {table}.state = 'done'",
            params,
        )
        return cursor.rowcount


# -- claiming the next URL -------------------------------------------------------------


def frontier_claim(*, crawl: Crawl) -> tuple[CrawlUrl, float] | None:
    """The next URL of the crawl whose host may be asked now (or within MAX_WAIT
    seconds), claimed for this worker, with the seconds to wait before the request.
    None when no URL can be taken now."""
    now = timezone.now()
    due = Q(state=CrawlUrl.State.QUEUED) & (Q(not_before=None) | Q(not_before__lte=now))
    abandoned = Q(state=CrawlUrl.State.FETCHING, claimed_at__lt=now - lease())
    with transaction.atomic():
        candidates = (
            CrawlUrl.objects.filter(due | abandoned, crawl=crawl)
            .order_by("-kind", "depth", "id")
            .select_for_update(skip_locked=True)[:20]
        )
        busy: set[str] = set()
        for row in candidates:
            if row.origin in busy:
                continue
            wait = host_turn_take(origin=row.origin, now=now, exclusive=True)
            if wait is None:
                busy.add(row.origin)
                continue
            row.state = CrawlUrl.State.FETCHING
            row.claimed_at = now
            row.attempts += 1
            row.save(update_fields=["state", "claimed_at", "attempts"])
            return row, wait
    return None


def host_turn_take(
    *, origin: str, now: datetime, exclusive: bool = False
) -> float | None:
    """Book the next request to ``origin``: the seconds to wait for it, or None if
    the host already has CRAWL_HOST_CONCURRENCY requests running (``exclusive``)
    or its turn is more than MAX_WAIT seconds away."""
    host = _host_locked(origin)
    if exclusive:
        running = CrawlUrl.objects.filter(
            origin=origin,
            state=CrawlUrl.State.FETCHING,
            claimed_at__gte=now - lease(),
        ).count()
        if running >= settings.CRAWL_HOST_CONCURRENCY:
            return None
    start = max(now, host.next_fetch_at)
    wait = (start - now).total_seconds()
    if exclusive and wait > MAX_WAIT:
        return None
    delay = max(settings.CRAWL_DELAY, host.delay)
    CrawlHost.objects.filter(pk=host.pk).update(
        next_fetch_at=start + timedelta(seconds=delay)
    )
    return wait


def _host_locked(origin: str) -> CrawlHost:
    host = CrawlHost.objects.select_for_update().filter(origin=origin).first()
    if host is not None:
        return host
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {CrawlHost._meta.db_table} (origin, robots_txt, delay, "
            "next_fetch_at) VALUES (%s, '', 0, %s) ON CONFLICT (origin) DO NOTHING",
            [origin, timezone.now()],
        )
    return CrawlHost.objects.select_for_update().get(origin=origin)


def host_turn_wait(*, origin: str) -> float:
    """Book a request to a host reached by a redirect; the seconds to wait."""
    with transaction.atomic():
        wait = host_turn_take(origin=origin, now=timezone.now())
    return wait or 0.0


def host_slow_down(*, origin: str, seconds: float) -> None:
    """The host asked for a pause (429, 503 with Retry-After): nothing goes to it
    before then, from any worker."""
    until = timezone.now() + timedelta(seconds=seconds)
    CrawlHost.objects.filter(origin=origin, next_fetch_at__lt=until).update(
        next_fetch_at=until
    )


def seconds_to_next(*, crawl: Crawl) -> float | None:
    """Seconds until a queued URL of the crawl may be claimed (its backoff over, its
    host's turn near), or None if none is queued (all done, or being fetched)."""
    now = timezone.now()
    due = Coalesce("not_before", Value(now, output_field=DateTimeField()))
    queued = crawl.urls.filter(state=CrawlUrl.State.QUEUED).order_by()
    rows = list(queued.values("origin").annotate(due=Min(due)))
    if not rows:
        return None
    hosts = CrawlHost.objects.filter(origin__in=[row["origin"] for row in rows])
    turns = dict(hosts.values_list("origin", "next_fetch_at"))
    near = timedelta(seconds=MAX_WAIT)
    soonest = min(max(row["due"], turns.get(row["origin"], now) - near) for row in rows)
    return max((soonest - now).total_seconds(), 0.0)


# -- what became of a URL --------------------------------------------------------------


def url_finish(
    *,
    row: CrawlUrl,
    result: str,
    site_status: int | None = None,
    error: str = "",
    delivery_id: int | None = None,
) -> None:
    CrawlUrl.objects.filter(pk=row.pk).update(
        state=CrawlUrl.State.DONE,
        result=result,
        site_status=site_status,
        error=error[:2000],
        delivery_id=delivery_id,
        done_at=timezone.now(),
    )


def url_retry_later(*, row: CrawlUrl, seconds: float, error: str) -> None:
    CrawlUrl.objects.filter(pk=row.pk).update(
        state=CrawlUrl.State.QUEUED,
        not_before=timezone.now() + timedelta(seconds=seconds),
        error=error[:2000],
        claimed_at=None,
    )


def url_reached(*, crawl: Crawl, url: str, result: str, delivery_id: int) -> None:
    """A URL reached by a redirect (or as a page's canonical URL) is done too: it is
    not fetched again by this crawl."""
    now = timezone.now()
    updated = CrawlUrl.objects.filter(
        crawl=crawl, url=url, state=CrawlUrl.State.QUEUED
    ).update(
        state=CrawlUrl.State.DONE, result=result, delivery_id=delivery_id, done_at=now
    )
    if not updated:
        CrawlUrl.objects.bulk_create(
            [
                CrawlUrl(
                    crawl=crawl,
                    url=url,
                    origin=origin_of(url)[:300],
                    state=CrawlUrl.State.DONE,
                    result=result,
                    delivery_id=delivery_id,
                    done_at=now,
                )
            ],
            ignore_conflicts=True,
        )
