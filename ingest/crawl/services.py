"""Crawls as a whole: starting one (or adding seeds to the one running), handing
due pages to the fetch jobs, and cancelling. A source has one running crawl at a
time: due pages join it, whatever its kind, and a site crawl started while due
pages are being fetched takes over the URLs they have left."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import transaction
from django.utils import timezone

from ingest.crawl import admission
from ingest.crawl.admission import Found
from ingest.crawl.jobs import NotCrawledHere, crawl_wake_cancel, crawl_workers_ensure
from ingest.crawl.models import Crawl, CrawlUrl
from ingest.fetchers.kinds import fetcher_kind, kinds_where
from sources.models import Page, Source
from sources.scope import ScopeMap

# Links followed from a page fetched again because it was due.
PAGES_DEPTH = 1


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
    if not fetcher_kind(source).crawled_here:
        raise NotCrawledHere(f"source {source} is crawled by {source.fetcher}")
    with transaction.atomic():
        Source.objects.select_for_update().filter(pk=source.pk).first()
        crawl = _running(source.pk)
        if crawl is not None and crawl.kind == Crawl.Kind.SITE:
            # Seeds asked for now join the running crawl (done ones stay done).
            found = [Found(url, depth=0) for url in seeds]
            admission.urls_admit(crawl=crawl, found=found, scope=ScopeMap())
            crawl_workers_ensure(crawl=crawl)
            return crawl, False
        pages_crawl = crawl
        crawl = Crawl.objects.create(
            source=source,
            kind=Crawl.Kind.SITE,
            max_pages=source.max_pages if max_pages is None else max_pages,
            max_depth=source.max_depth if max_depth is None else max_depth,
        )
        if pages_crawl is not None:
            _urls_take_over(crawl=crawl, pages_crawl=pages_crawl)
        found = [Found(url, depth=0) for url in seeds or source.seeds]
        if source.sitemap_url:
            found.append(Found(source.sitemap_url, 0, kind=CrawlUrl.Kind.SITEMAP))
        admission.urls_admit(crawl=crawl, found=found, scope=ScopeMap())
        crawl_workers_ensure(crawl=crawl)
    return crawl, True


def _urls_take_over(*, crawl: Crawl, pages_crawl: Crawl) -> None:
    """The site crawl takes the URLs a crawl of due pages has left (those being
    fetched too: their workers finish them by id), and that crawl ends. Its row is
    locked first, so no link is taken into it meanwhile (``urls_admit``)."""
    Crawl.objects.select_for_update().filter(pk=pages_crawl.pk).first()
    pages_crawl.urls.open().update(crawl=crawl)
    Crawl.objects.filter(pk=pages_crawl.pk, state=Crawl.State.RUNNING).update(
        state=Crawl.State.DONE, finished_at=timezone.now()
    )
    crawl_wake_cancel(crawl=pages_crawl)


def page_fetch_queue(*, page_ids: Iterable[int]) -> int:
    """Fetch these pages again (the recrawl planner's entry point for sources this
    product crawls itself): conditional requests, and links to pages the source
    does not have yet followed one level. Pages of Crawlbase sources are left out.
    The pages are fetched in the order given (a URL new to the crawl goes after
    those it has). Returns how many were queued."""
    ids = list(page_ids)
    pages = Page.objects.filter(
        pk__in=ids,
        source__fetcher__in=kinds_where(lambda kind: kind.crawled_here),
    )
    found = {pk: (source_id, url) for pk, source_id, url in
             pages.values_list("pk", "source_id", "url")}  # fmt: skip
    by_source: dict[int, list[str]] = {}
    for pk in dict.fromkeys(ids):
        if pk in found:
            source_id, url = found[pk]
            by_source.setdefault(source_id, []).append(url)
    queued = 0
    for source_id, urls in by_source.items():
        with transaction.atomic():
            crawl = _pages_crawl(source_id)
            queued += admission.pages_requeue(crawl=crawl, urls=urls)
            crawl_workers_ensure(crawl=crawl)
    return queued


def _running(source_id: int) -> Crawl | None:
    """The source's running crawl (the caller holds the source's row locked)."""
    running = Crawl.objects.filter(source_id=source_id, state=Crawl.State.RUNNING)
    return running.order_by("started_at", "pk").first()


def _pages_crawl(source_id: int) -> Crawl:
    """The source's running crawl, of any kind, which due pages join; or a new
    crawl of due pages."""
    source = Source.objects.select_for_update().get(pk=source_id)
    crawl = _running(source_id)
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
    crawl_wake_cancel(crawl=crawl)
    return bool(
        Crawl.objects.filter(pk=crawl.pk, state=Crawl.State.RUNNING).update(
            state=Crawl.State.CANCELLED, finished_at=timezone.now()
        )
    )
