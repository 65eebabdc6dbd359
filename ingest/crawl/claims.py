"""Which URL of a crawl a worker fetches next, and when: every step is a claim in
the database, so several workers (and a worker started again after a crash) share
one crawl without fetching a URL twice, and each host gets its requests in turn."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, Min, Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from ingest.crawl import sql
from ingest.crawl.models import Crawl, CrawlHost, CrawlUrl

# A worker waits at most this long for a host's turn, rather than take another URL.
MAX_WAIT = 10.0


def lease() -> timedelta:
    """How long a claimed URL belongs to its worker: a job runs at most Q_TIMEOUT
    seconds, so a claim older than that was left by a worker that died."""
    return timedelta(seconds=settings.Q_TIMEOUT)


@dataclass(frozen=True)
class Claim:
    row: CrawlUrl
    wait: float = 0.0  # seconds before the request may start
    # Why the URL fails without a request: its attempts are spent.
    give_up: str = ""


def attempts_allowed() -> int:
    return settings.CRAWL_RETRIES + 1


def frontier_claim(*, crawl: Crawl) -> Claim | None:
    """The next URL of the crawl whose host may be asked now (or within MAX_WAIT
    seconds), claimed for this worker, with the seconds to wait before the request.
    A URL whose attempts are spent (its worker died on it each time, or
    CRAWL_RETRIES was lowered) is claimed to be failed, not fetched. None when no
    URL can be taken now."""
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
            if row.attempts >= attempts_allowed():
                give_up = _spent(row)
                _take(row, now)
                return Claim(row=row, give_up=give_up)
            if row.origin in busy:
                continue
            wait = host_turn_take(origin=row.origin, now=now, exclusive=True)
            if wait is None:
                busy.add(row.origin)
                continue
            row.attempts += 1
            _take(row, now)
            return Claim(row=row, wait=wait)
    return None


def _take(row: CrawlUrl, now: datetime) -> None:
    row.state = CrawlUrl.State.FETCHING
    row.claimed_at = now
    row.save(update_fields=["state", "claimed_at", "attempts"])


def _spent(row: CrawlUrl) -> str:
    before = f"; before: {row.error}" if row.error else ""
    if row.state == CrawlUrl.State.FETCHING:
        return (
            f"gave up after {row.attempts} attempts: the last never finished "
            f"(its worker stopped){before}"
        )
    return f"gave up after {row.attempts} attempts{before}"


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
    sql.host_insert(origin=origin, next_fetch_at=timezone.now())
    return CrawlHost.objects.select_for_update().get(origin=origin)


def host_turn_end(*, origin: str) -> None:
    """A request to ``origin`` has ended: its host's next turn is at least its
    delay away from now. The delay runs from the end of each request, not from
    the turn booked for it, so a request that started late (a slow commit, a
    busy machine) never brings the next one closer than the site asked."""
    host = CrawlHost.objects.filter(origin=origin).only("delay").first()
    if host is None:
        return
    delay = max(settings.CRAWL_DELAY, host.delay)
    until = timezone.now() + timedelta(seconds=delay)
    CrawlHost.objects.filter(pk=host.pk, next_fetch_at__lt=until).update(
        next_fetch_at=until
    )


def host_turn_wait(*, origin: str) -> float:
    """Book a request to a host reached by a redirect; the seconds to wait."""
    with transaction.atomic():
        wait = host_turn_take(origin=origin, now=timezone.now())
    return wait or 0.0


def host_slow_down(*, origin: str, seconds: float, asked_by: str) -> float:
    """The host asked for a pause (429, 503 with Retry-After): nothing goes to it
    before then, from any worker. One longer than CRAWL_MAX_DELAY pauses the host
    for CRAWL_MAX_DELAY, with the reason. Returns the seconds it waits."""
    cap = settings.CRAWL_MAX_DELAY
    if seconds > cap:
        host_pause(origin=origin, reason=f"{asked_by} asks for {seconds:,.0f} s")
        return float(cap)
    until = timezone.now() + timedelta(seconds=seconds)
    CrawlHost.objects.filter(origin=origin, next_fetch_at__lt=until).update(
        next_fetch_at=until
    )
    return seconds


def host_pause(*, origin: str, reason: str) -> None:
    """The site asked for a wait longer than CRAWL_MAX_DELAY (a Retry-After, a
    robots.txt Crawl-delay): nothing goes to it for CRAWL_MAX_DELAY, and the
    reason is kept for the crawls waiting on it to show."""
    cap = settings.CRAWL_MAX_DELAY
    until = timezone.now() + timedelta(seconds=cap)
    CrawlHost.objects.filter(origin=origin).update(
        next_fetch_at=Greatest(
            "next_fetch_at", Value(until, output_field=DateTimeField())
        ),
        paused_until=until,
        pause_reason=(
            f"{origin}: {reason}, more than CRAWL_MAX_DELAY ({cap:,} s); "
            f"paused until {until:%Y-%m-%d %H:%M} UTC"
        ),
    )


def hosts_paused(*, origins: list[str]) -> list[str]:
    """Why each of these hosts is paused now, if it is."""
    paused = CrawlHost.objects.filter(
        origin__in=origins, paused_until__gt=timezone.now()
    ).exclude(pause_reason="")
    return list(paused.order_by("origin").values_list("pause_reason", flat=True))


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
