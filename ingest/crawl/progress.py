"""A crawl's progress for people watching: its URLs by result, its deliveries by
outcome, counted in the database, and why it waits when a host is paused."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count

from ingest.crawl.claims import hosts_paused
from ingest.models import Crawl, CrawlUrl, Delivery


@dataclass
class Progress:
    state: str
    pages: Counter[str] = field(default_factory=Counter)  # result ("" = open)
    sitemaps: Counter[str] = field(default_factory=Counter)
    deliveries: Counter[str] = field(default_factory=Counter)  # outcome ("" = open)
    paused: list[str] = field(default_factory=list)  # why hosts of open URLs wait

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


def crawl_progress(*, crawl: Crawl) -> Progress:
    crawl.refresh_from_db(fields=["state"])
    progress = Progress(state=crawl.state)
    rows = crawl.urls.order_by().values_list("kind", "result").annotate(n=Count("id"))
    for kind, result, n in rows:
        target = progress.pages if kind == CrawlUrl.Kind.PAGE else progress.sitemaps
        target[result] += n
    delivered = crawl.urls.exclude(delivery=None).values("delivery_id")
    outcomes = (
        Delivery.objects.filter(pk__in=delivered).order_by().values_list("outcome")
    )
    for outcome, n in outcomes.annotate(n=Count("id")):
        progress.deliveries[outcome] += n
    if progress.queued or progress.sitemaps[""]:
        waiting = crawl.urls.open().order_by().values_list("origin", flat=True)
        progress.paused = hosts_paused(origins=list(waiting.distinct()))
    return progress
