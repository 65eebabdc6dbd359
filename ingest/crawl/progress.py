"""A crawl's progress for people watching: its URLs by result, its deliveries by
outcome, counted in the database; how many pages are fetched, indexed and left,
and how long the rest should take at the rate of the last minutes; and why it
waits when a host is paused.

A crawl's row says *done* once nothing is left to fetch; for the people watching
it is done once what it fetched is indexed too (its deliveries have all been
through ingest), and until then it is *indexing*."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, Max, Q, QuerySet
from django.utils import timezone

from ingest.crawl.claims import hosts_paused
from ingest.crawl.models import Crawl, CrawlUrl
from ingest.delivery.models import Delivery

Result = CrawlUrl.Result
# Links turned away at the door: not pages of the crawl.
NOT_ADMITTED = {Result.SCOPE, Result.TYPE}
# Results with a response delivered: the site was reached.
REACHED = {Result.FETCHED, Result.NOT_MODIFIED, Result.GONE}
# The rates of the time left are measured over this much of the latest past, and
# believed once they rest on so many pages and seconds.
RATE_WINDOW = timedelta(minutes=5)
MIN_SAMPLES = 5
MIN_SECONDS = 20.0
MINUTE = timedelta(minutes=1)


class Status:
    FETCHING = "Fetching"
    INDEXING = "Indexing"
    DONE = "Done"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


@dataclass
class Progress:
    state: str
    pages: Counter[str] = field(default_factory=Counter)  # result ("" = open)
    sitemaps: Counter[str] = field(default_factory=Counter)
    deliveries: Counter[str] = field(default_factory=Counter)  # outcome ("" = open)
    paused: list[str] = field(default_factory=list)  # why hosts of open URLs wait
    # Pages done and deliveries indexed within the last ``window`` seconds.
    fetched_recently: int = 0
    indexed_recently: int = 0
    window: float = 0.0
    # Deliveries of other crawls (or of Crawlbase) waiting for ingest while this
    # one has pages to fetch and fetched none lately: the queue it waits behind.
    waiting_behind: int = 0
    # When the last of its deliveries went through ingest, once all have.
    indexed_at: datetime | None = None

    @property
    def queued(self) -> int:
        return self.pages[""]

    @property
    def done(self) -> int:
        return sum(n for result, n in self.pages.items() if result)

    @property
    def total(self) -> int:
        return sum(self.pages.values())

    @property
    def indexing(self) -> int:
        return self.deliveries[""]

    @property
    def finished(self) -> bool:
        return self.state != Crawl.State.RUNNING and not self.indexing

    # -- fetched, indexed, left ---------------------------------------------------

    @property
    def admitted(self) -> int:
        """The crawl's pages: what it took in, not links turned away."""
        return sum(n for r, n in self.pages.items() if r not in NOT_ADMITTED)

    @property
    def fetched_count(self) -> int:
        """Pages the site answered (200, 304, or gone): each makes a delivery."""
        return sum(self.pages[r] for r in REACHED)

    @property
    def not_fetched(self) -> int:
        """Pages done with nothing fetched: failed, refused, kept out by robots."""
        return self.admitted - self.queued - self.fetched_count

    @property
    def indexed_count(self) -> int:
        """Deliveries ingest is done with."""
        return sum(n for outcome, n in self.deliveries.items() if outcome)

    @property
    def left(self) -> int:
        """Pages still to fetch, and fetched pages still to index."""
        return self.queued + self.indexing

    @property
    def status(self) -> str:
        if self.state == Crawl.State.CANCELLED:
            return Status.CANCELLED
        if self.state == Crawl.State.RUNNING:
            return Status.FETCHING
        if self.indexing:
            return Status.INDEXING
        if not self.fetched_count:
            # No page answered: every one failed, was refused or kept out by
            # robots.txt, or none was in scope.
            return Status.FAILED
        return Status.DONE

    @property
    def time_left(self) -> timedelta | None:
        return time_left(
            to_fetch=self.queued,
            to_index=self.indexing,
            fetched=self.fetched_recently,
            indexed=self.indexed_recently,
            seconds=self.window,
        )

    def time_left_words(self) -> str:
        """ "about 4 min", "estimating…", or why there is no estimate."""
        if not self.left:
            return ""
        left = self.time_left
        if left is not None:
            if left < MINUTE:
                return "less than a minute"
            return f"about {duration_words(left)}"
        if self.waiting_behind:
            return (
                f"waiting: the worker is indexing {self.waiting_behind:,} pages "
                "of other crawls first"
            )
        stalled = self.fetched_recently + self.indexed_recently == 0
        if stalled and self.window >= RATE_WINDOW.total_seconds():
            minutes = int(RATE_WINDOW.total_seconds() // 60)
            return f"nothing moved in the last {minutes} minutes"
        return "estimating…"

    def summary(self) -> str:
        """ "fetched 106 of 150 · 3 skipped or failed · indexed 80 · 67 left
        (about 4 min)"."""
        skipped = (
            f" · {self.not_fetched:,} skipped or failed" if self.not_fetched else ""
        )
        text = (
            f"fetched {self.fetched_count:,} of {self.admitted:,}{skipped} · "
            f"indexed {self.indexed_count:,} · {self.left:,} left"
        )
        if self.status in (Status.FETCHING, Status.INDEXING) and self.left:
            text += f" ({self.time_left_words()})"
        return text

    # -- the details ----------------------------------------------------------------

    def counts(self) -> str:
        p, r = self.pages, CrawlUrl.Result
        counts = (
            f"fetched {p[r.FETCHED]}, queued {self.queued}, unchanged (304) "
            f"{p[r.NOT_MODIFIED]}, gone {p[r.GONE]}, skipped robots {p[r.ROBOTS]} "
            f"scope {p[r.SCOPE]} type {p[r.TYPE]}, failed {p[r.FAILED] + p[r.REFUSED]}"
        )
        return "; ".join([counts, *self.paused])

    def indexed(self) -> str:
        counts = sorted(self.deliveries.items())
        return ", ".join(f"{n} {outcome or 'waiting'}" for outcome, n in counts)


def time_left(
    *, to_fetch: int, to_index: int, fetched: int, indexed: int, seconds: float
) -> timedelta | None:
    """How long the pages left should take at the rates seen over the last
    ``seconds`` (``fetched`` pages done, ``indexed`` deliveries through ingest):
    the slower of fetching what is queued and indexing it with what waits; None
    while too little was seen to say."""
    if not to_fetch and not to_index:
        return timedelta(0)
    if seconds < MIN_SECONDS or indexed < MIN_SAMPLES:
        return None
    estimates = [(to_fetch + to_index) * seconds / indexed]
    if to_fetch:
        if fetched < MIN_SAMPLES:
            return None
        estimates.append(to_fetch * seconds / fetched)
    return timedelta(seconds=round(max(estimates)))


def duration_words(value: timedelta) -> str:
    """ "less than a minute", "4 min", "1 h 20 min"."""
    minutes = round(value.total_seconds() / 60)
    if minutes < 1:
        return "less than a minute"
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def crawl_progress(*, crawl: Crawl, now: datetime | None = None) -> Progress:
    crawl.refresh_from_db(fields=["state", "started_at"])
    now = now or timezone.now()
    progress = Progress(state=crawl.state)
    rows = crawl.urls.order_by().values_list("kind", "result").annotate(n=Count("id"))
    for kind, result, n in rows:
        target = progress.pages if kind == CrawlUrl.Kind.PAGE else progress.sitemaps
        target[result] += n
    delivered = crawl.urls.exclude(delivery=None).values("delivery_id")
    deliveries = Delivery.objects.filter(pk__in=delivered).order_by()
    for outcome, n in deliveries.values_list("outcome").annotate(n=Count("id")):
        progress.deliveries[outcome] += n
    if progress.left:
        _rates_measure(progress, crawl, deliveries, now=now)
    stalled = not progress.fetched_recently and progress.window >= MIN_SECONDS
    if progress.queued and stalled:
        others = Delivery.objects.filter(state__in=Delivery.WAITING)
        progress.waiting_behind = others.exclude(pk__in=delivered).count()
    if progress.finished and progress.deliveries:
        done = deliveries.aggregate(at=Max("processed_at"))
        progress.indexed_at = done["at"]
    if progress.queued or progress.sitemaps[""]:
        waiting = crawl.urls.open().order_by().values_list("origin", flat=True)
        progress.paused = hosts_paused(origins=list(waiting.distinct()))
    return progress


def crawl_errors(*, crawl: Crawl) -> QuerySet[CrawlUrl]:
    """The crawl's URLs that gave it nothing, with why, latest first: failed or
    refused, and seeds (or due pages) robots.txt or noindex kept out."""
    kept_out = Q(result=Result.ROBOTS, depth=0, kind=CrawlUrl.Kind.PAGE)
    failed = Q(result__in=[Result.FAILED, Result.REFUSED])
    return (
        crawl.urls.filter(failed | kept_out)
        .exclude(error="")
        .order_by(F("done_at").desc(nulls_last=True), "-pk")
    )


def _rates_measure(
    progress: Progress, crawl: Crawl, deliveries: QuerySet[Delivery], *, now: datetime
) -> None:
    since = max(crawl.started_at, now - RATE_WINDOW)
    progress.window = max((now - since).total_seconds(), 0.0)
    pages = crawl.urls.admitted().filter(done_at__gte=since)
    progress.fetched_recently = pages.count()
    progress.indexed_recently = deliveries.filter(processed_at__gte=since).count()
