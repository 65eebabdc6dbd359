"""Recrawls: which pages are checked again, and handing them to their fetcher.

Every page is due at its own time (``Page.next_crawl_at``). The planner runs as a
django-q2 schedule and as ``manage.py recrawl``; a PostgreSQL advisory lock lets
one planner act at a time however many clusters or commands run, and the partial
unique index on in-flight pushes makes a second push of a page impossible anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django_q.tasks import async_task

from ingest.crawl.models import CrawlUrl
from ingest.crawl.services import crawl_start, page_fetch_queue
from ingest.delivery.models import Delivery
from ingest.fetchers.kinds import fetcher_kind, kinds_where
from ingest.pushing.models import Push
from ingest.pushing.services import pages_push_queue, pushes_expire
from kbsite import locks
from kbsite.canonical import canonical_url_or_none
from sources.models import SYSTEM, Caller, Page, Source
from sources.scope import ScopeMap

SEND_TASK = "ingest.tasks.pushes_send_task"
SITEMAPS_TASK = "ingest.tasks.source_sitemaps_push_task"
# Who may queue a recrawl (the API, the admin's buttons and actions), of the
# sources they see: editors who may change sources.
RECRAWL_PERMISSION = "sources.change_source"


@dataclass
class RecrawlPlan:
    selected: int = 0
    queued: int = 0
    in_flight: int = 0  # skipped: a push of the page is waiting or sent
    indexing: int = 0  # skipped: fetched, its delivery waiting for ingest
    fetching: int = 0  # handed to the built-in (or Nstproxy) fetcher
    out_of_scope: int = 0  # URLs no source covers
    busy: bool = False  # another planner was at work; nothing done

    def __add__(self, other: RecrawlPlan) -> RecrawlPlan:
        return RecrawlPlan(
            selected=self.selected + other.selected,
            queued=self.queued + other.queued,
            in_flight=self.in_flight + other.in_flight,
            indexing=self.indexing + other.indexing,
            fetching=self.fetching + other.fetching,
            out_of_scope=self.out_of_scope + other.out_of_scope,
            busy=self.busy or other.busy,
        )

    def __str__(self) -> str:
        if self.busy:
            return "another recrawl is being planned; nothing done"
        # Only what happened: a source of one fetcher has nothing to say of the
        # other's counts.
        parts = [
            f"{self.queued} queued for Crawlbase" if self.queued else "",
            f"{self.in_flight} skipped (a push in flight)" if self.in_flight else "",
            f"{self.indexing} skipped (fetched, waiting to be indexed)"
            if self.indexing
            else "",
            f"{self.fetching} queued for the built-in fetcher" if self.fetching else "",
            f"{plural(self.out_of_scope, 'URL')} out of every scope"
            if self.out_of_scope
            else "",
        ]
        done = ", ".join(part for part in parts if part)
        return f"{plural(self.selected, 'page')} selected" + (
            f": {done}" if done else ""
        )


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def recrawl_due(
    *,
    source: Source | None = None,
    everything: bool = False,
    limit: int | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> RecrawlPlan:
    """Queue the due pages (or every page with ``everything``) for their crawler."""
    now = now or timezone.now()
    with transaction.atomic():
        if not _planner_lock():
            return RecrawlPlan(busy=True)
        if not dry_run:
            pushes_expire(now=now)
        pages = Page.objects.all() if everything else Page.objects.due(now=now)
        if source is not None:
            pages = pages.filter(source=source)
        pages = pages.order_by("next_crawl_at", "pk")
        return pages_recrawl(pages=pages, limit=limit, dry_run=dry_run)


def pages_recrawl(
    *, pages: QuerySet[Page], limit: int | None = None, dry_run: bool = False
) -> RecrawlPlan:
    """Hand these pages (at most ``limit``) to their sources' crawlers: pushes to
    Crawlbase, fetches by the built-in (or Nstproxy) fetcher."""
    plan = RecrawlPlan(indexing=pages.filter(_fetched_not_indexed()).count())
    pages = pages.exclude(_fetched_not_indexed())
    if limit is not None:
        # The first ``limit`` in the pages' order, kept in it (the most overdue
        # get the first pushes).
        chosen = Page.objects.filter(pk__in=pages[:limit].values("pk"))
        pages = chosen.order_by(*pages.query.order_by)
    pushed_kinds = kinds_where(lambda kind: not kind.crawled_here)
    pushed = pages.filter(source__fetcher__in=pushed_kinds)
    here = pages.exclude(source__fetcher__in=pushed_kinds)
    if dry_run:
        plan.selected = pages.count() + plan.indexing
        plan.in_flight = pushed.filter(pushes__state__in=Push.IN_FLIGHT).count()
        return plan
    plan.queued, plan.in_flight = pages_push_queue(pages=pushed)
    plan.fetching = page_fetch_queue(page_ids=here.values_list("pk", flat=True))
    plan.selected = plan.queued + plan.in_flight + plan.fetching + plan.indexing
    if plan.queued:
        transaction.on_commit(pushes_send_soon)
    return plan


def _fetched_not_indexed() -> Q:
    """Pages fetched already, whose delivery waits for ingest: a page a first
    crawl fetched is pending (and so due) until its delivery is read, and fetching
    it again would only queue the same work behind its own."""
    waiting = Delivery.objects.filter(state__in=Delivery.WAITING)
    requested = waiting.exclude(requested_url="").exclude(requested_url=None)
    return Q(url__in=waiting.values("url")) | Q(
        url__in=requested.values("requested_url")
    )


def urls_recrawl(
    *,
    urls: Iterable[str],
    user: Caller,
    source: Source | None = None,
    dry_run: bool = False,
) -> RecrawlPlan:
    """Queue these URLs: pages are created for new ones, in the source each URL
    belongs to (which must be ``source``, if one is given); URLs that belong to no
    source (or not to ``source``), or cannot be parsed, are counted. A URL of a
    source hidden from ``user`` counts as one of no source: the same answer. With
    ``dry_run``, only counted: no page made, nothing queued."""
    plan = RecrawlPlan()
    ids = []
    new = 0
    scope = ScopeMap()
    hidden = set(Source.objects.hidden_from(user).values_list("pk", flat=True))
    with transaction.atomic():
        for url in dict.fromkeys(canonical_url_or_none(u) for u in urls):
            owner = scope.source_for(url) if url else None
            if url is None or owner is None or (source and owner.pk != source.pk):
                plan.out_of_scope += 1
                continue
            page = Page.objects.filter(url=url).first()
            if hidden & {owner.pk, page.source_id if page else owner.pk}:
                plan.out_of_scope += 1
                continue
            if page is None and dry_run:
                new += 1
                continue
            if page is None:
                page = Page.objects.create(url=url, source=owner)
            ids.append(page.pk)
        found = pages_recrawl(pages=Page.objects.filter(pk__in=ids), dry_run=dry_run)
    found.selected += new
    found.out_of_scope = plan.out_of_scope
    return found


def source_crawl_start(*, source: Source, sitemaps: bool = True) -> RecrawlPlan:
    """Crawl the source from its seeds (and sitemap): the built-in crawler starts
    (or resumes) a crawl of the site; for Crawlbase, a page is made and pushed for
    each seed, the source's sitemaps are read by a job once this transaction
    commits (``sitemaps``; no network call here), and the pages they link to
    follow as they are delivered."""
    kind = fetcher_kind(source)
    if kind.crawled_here:
        crawl, _ = crawl_start(source=source)
        queued = crawl.urls.open().filter(kind=CrawlUrl.Kind.PAGE).count()
        return RecrawlPlan(selected=queued, fetching=queued)
    plan = urls_recrawl(
        urls=source.seeds[: source.max_pages], source=source, user=SYSTEM
    )
    if sitemaps and not kind.reads_sitemaps:
        transaction.on_commit(
            lambda: async_task(SITEMAPS_TASK, source.pk, task_name="read sitemaps")
        )
    return plan


def pushes_send_soon() -> None:
    async_task(SEND_TASK, task_name="send queued pushes")


def _planner_lock() -> bool:
    return locks.xact_lock_try(lock=locks.RECRAWL_PLANNER)
