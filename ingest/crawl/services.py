"""Crawls as a whole: starting one, handing due pages to the fetch jobs, the jobs'
work loop, resuming after a crash, and progress for people watching."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.tasks import async_task

from ingest.crawl import admission, claims
from ingest.crawl.admission import Found
from ingest.crawl.context import Context
from ingest.crawl.fetch import crawl_url_fetch
from ingest.crawl.fetchers import DirectFetcher, Fetcher, FetchError
from ingest.crawl.nstproxy import NstproxyFetcher
from ingest.crawl.robots import RobotsCache
from ingest.models import Crawl, CrawlUrl, Delivery
from sources.models import Page, Source
from sources.scope import ScopeMap

logger = logging.getLogger(__name__)

CRAWL_TASK = "ingest.tasks.crawl_work_task"
# Links followed from a page fetched again because it was due.
PAGES_DEPTH = 1


class NotCrawledHere(ValueError):
    """The source's pages come from Crawlbase, not from this product's fetchers."""


def fetcher_for(source: Source) -> Fetcher:
    if source.fetcher == Source.Fetcher.NSTPROXY:
        return NstproxyFetcher()
    if source.fetcher == Source.Fetcher.DIRECT:
        return DirectFetcher()
    raise NotCrawledHere(f"source {source} is crawled by {source.fetcher}")


def job_seconds() -> float:
    """How long one crawl job fetches before it hands over to a fresh job (at the
    back of the queue, so delivery jobs queued meanwhile run first): well inside
    Q_TIMEOUT, which kills a job."""
    return max(min(60.0, settings.Q_TIMEOUT / 4), 2.0)


# -- starting --------------------------------------------------------------------------


def crawl_start(
    *,
    source: Source,
    seeds: Sequence[str] = (),
    max_pages: int | None = None,
    max_depth: int | None = None,
) -> tuple[Crawl, bool]:
    """Start a crawl of the source's site from its seeds (or these) and sitemap;
    or, when one is running, resume that one (with these seeds added). Returns
    (crawl, started)."""
    if not source.is_crawled_here:
        raise NotCrawledHere(f"source {source} is crawled by {source.fetcher}")
    with transaction.atomic():
        Source.objects.select_for_update().filter(pk=source.pk).first()
        running = source.crawls.filter(kind=Crawl.Kind.SITE, state=Crawl.State.RUNNING)
        crawl = running.first()
        if crawl is not None:
            # Seeds asked for now join the running crawl (done ones stay done).
            found = [Found(url, depth=0) for url in seeds]
            admission.urls_admit(crawl=crawl, found=found, scope=ScopeMap())
            crawl_workers_ensure(crawl=crawl)
            return crawl, False
        crawl = Crawl.objects.create(
            source=source,
            kind=Crawl.Kind.SITE,
            max_pages=source.max_pages if max_pages is None else max_pages,
            max_depth=source.max_depth if max_depth is None else max_depth,
        )
        found = [Found(url, depth=0) for url in seeds or source.seeds]
        if source.sitemap_url:
            found.append(Found(source.sitemap_url, 0, kind=CrawlUrl.Kind.SITEMAP))
        admission.urls_admit(crawl=crawl, found=found, scope=ScopeMap())
        crawl_workers_ensure(crawl=crawl)
    return crawl, True


def page_fetch_queue(*, page_ids: Iterable[int]) -> int:
    """Fetch these pages again (the recrawl planner's entry point for sources this
    product crawls itself): conditional requests, and links to pages the source
    does not have yet followed one level. Pages of Crawlbase sources are left out.
    Returns how many were queued."""
    pages = Page.objects.filter(
        pk__in=list(page_ids),
        source__fetcher__in=[Source.Fetcher.DIRECT, Source.Fetcher.NSTPROXY],
    )
    by_source: dict[int, list[str]] = {}
    for source_id, url in pages.values_list("source_id", "url"):
        by_source.setdefault(source_id, []).append(url)
    queued = 0
    for source_id, urls in by_source.items():
        with transaction.atomic():
            crawl = _pages_crawl(source_id)
            queued += admission.pages_requeue(crawl=crawl, urls=urls)
            crawl_workers_ensure(crawl=crawl)
    return queued


def _pages_crawl(source_id: int) -> Crawl:
    source = Source.objects.select_for_update().get(pk=source_id)
    running = source.crawls.filter(kind=Crawl.Kind.PAGES, state=Crawl.State.RUNNING)
    crawl = running.first()
    if crawl is None:
        crawl = Crawl.objects.create(
            source=source,
            kind=Crawl.Kind.PAGES,
            max_pages=source.max_pages,
            max_depth=PAGES_DEPTH,
        )
    return crawl


def crawl_cancel(*, crawl: Crawl) -> bool:
    """Stop a running crawl: its jobs end after the URL they are on."""
    return bool(
        Crawl.objects.filter(pk=crawl.pk, state=Crawl.State.RUNNING).update(
            state=Crawl.State.CANCELLED, finished_at=timezone.now()
        )
    )


# -- the jobs --------------------------------------------------------------------------


def crawl_workers_ensure(*, crawl: Crawl) -> int:
    """Queue fetch jobs for the crawl up to CRAWL_WORKERS (counting those already
    on the queue, or taken by a worker); returns how many were added."""
    missing = settings.CRAWL_WORKERS - _jobs_queued().get(crawl.pk, 0)
    for _ in range(max(missing, 0)):
        crawl_job_enqueue(crawl=crawl)
    return max(missing, 0)


def crawl_job_enqueue(*, crawl: Crawl) -> None:
    async_task(CRAWL_TASK, crawl.pk, task_name=f"crawl {crawl.pk}")


def _jobs_queued() -> Counter[int]:
    jobs: Counter[int] = Counter()
    for row in OrmQ.objects.filter(key=get_broker().list_key).iterator():
        task = row.task
        if isinstance(task, dict) and task.get("func") == CRAWL_TASK and task["args"]:
            jobs[task["args"][0]] += 1
    return jobs


def crawl_work(*, crawl_id: int, seconds: float | None = None) -> str:
    """One fetch job: take URLs of the crawl one at a time for ``seconds``, then
    queue the next job if URLs are left. Safe to run in many workers at once."""
    crawl = Crawl.objects.select_related("source").filter(pk=crawl_id).first()
    if crawl is None or not crawl.is_running:
        return "not running"
    try:
        fetcher = fetcher_for(crawl.source)
    except (FetchError, NotCrawledHere) as exc:
        crawl_abort(crawl=crawl, error=str(exc))
        return "aborted"
    prefix = "nstproxy" if crawl.source.fetcher == Source.Fetcher.NSTPROXY else "direct"
    ctx = Context(
        crawl=crawl,
        fetcher=fetcher,
        scope=ScopeMap(),
        robots=RobotsCache(fetcher),
        rid_prefix=prefix,
    )
    try:
        state = _work(ctx, time.monotonic() + (seconds or job_seconds()))
    finally:
        fetcher.close()
    if state == "continues":
        crawl_job_enqueue(crawl=crawl)
    return state


def _work(ctx: Context, deadline: float) -> str:
    crawl = ctx.crawl
    running = Crawl.objects.filter(pk=crawl.pk, state=Crawl.State.RUNNING)
    while time.monotonic() < deadline:
        # The heartbeat, and whether the crawl was cancelled meanwhile.
        if not running.update(heartbeat_at=timezone.now()):
            return "cancelled"
        claimed = claims.frontier_claim(crawl=crawl)
        if claimed is None:
            pause = claims.seconds_to_next(crawl=crawl)
            if pause is None:
                # Nothing queued: done, or the last URLs are with other workers
                # (whoever finishes the last one closes the crawl).
                crawl_finish_if_done(crawl=crawl)
                return "done"
            pause = max(pause, 0.2)
            if time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            continue
        row, wait = claimed
        time.sleep(wait)
        crawl_url_fetch(ctx=ctx, row=row)
    return "continues"


def crawl_finish_if_done(*, crawl: Crawl) -> bool:
    if crawl.urls.open().exists():
        return False
    return bool(
        Crawl.objects.filter(pk=crawl.pk, state=Crawl.State.RUNNING).update(
            state=Crawl.State.DONE, finished_at=timezone.now()
        )
    )


def crawl_abort(*, crawl: Crawl, error: str) -> None:
    """The crawl cannot go on (its fetcher is not configured): every open URL
    fails with the reason, and the crawl ends."""
    logger.error("crawl %s stopped: %s", crawl.pk, error)
    crawl.urls.open().update(
        state=CrawlUrl.State.DONE,
        result=CrawlUrl.Result.FAILED,
        error=error[:2000],
        done_at=timezone.now(),
    )
    crawl_finish_if_done(crawl=crawl)


def crawls_resume() -> int:
    """Every running crawl either closes (nothing left) or has its jobs on the
    queue: jobs lost to a crash or a purge are queued again. Returns how many jobs
    were queued."""
    added = 0
    for crawl in Crawl.objects.filter(state=Crawl.State.RUNNING):
        if not crawl_finish_if_done(crawl=crawl):
            added += crawl_workers_ensure(crawl=crawl)
    return added


# -- progress --------------------------------------------------------------------------


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
