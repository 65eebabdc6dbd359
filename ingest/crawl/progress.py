"""A crawl's progress for people watching: its URLs by result, and its deliveries
by outcome, counted in the database."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count

from ingest.models import Crawl, CrawlUrl, Delivery


@dataclass
class Progress:
    state: str
    pages: Counter[str] = field(default_factory=Counter)  # result ("" = open)
    sitemaps: Counter[str] = field(default_factory=Counter)
    deliveries: Counter[str] = field(default_factory=Counter)  # outcome ("" = open)

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
        return (
            f"fetched {p[r.FETCHED]}, queued {self.queued}, unchanged (304) "
            f"{p[r.NOT_MODIFIED]}, gone {p[r.GONE]}, skipped robots {p[r.ROBOTS]} "
            f"scope {p[r.SCOPE]} type {p[r.TYPE]}, failed {p[r.FAILED] + p[r.REFUSED]}"
        )

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
    return progress
