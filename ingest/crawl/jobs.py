"""The crawl's fetch jobs: how many a crawl has on the queue, the work loop of one
(URLs taken one at a time until its time is up, then a fresh job at the back of
the queue; or, when nothing can be fetched for longer than a job runs, one job
scheduled for when something can), closing a crawl with nothing left, and resuming
after a crash."""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import OrmQ, Schedule
from django_q.tasks import async_task

from ingest.crawl import claims
from ingest.crawl.context import Context
from ingest.crawl.delivering import url_fail
from ingest.crawl.fetch import crawl_url_fetch
from ingest.crawl.models import Crawl, CrawlUrl
from ingest.crawl.robots import RobotsCache
from ingest.fetchers.http import Fetcher, FetchError
from ingest.fetchers.kinds import fetcher_kind
from sources.models import Source
from sources.scope import ScopeMap

logger = logging.getLogger(__name__)

CRAWL_TASK = "ingest.tasks.crawl_work_task"


class NotCrawledHere(ValueError):
    """The source's pages come from Crawlbase, not from this product's fetchers."""


def fetcher_for(source: Source) -> Fetcher:
    client = fetcher_kind(source).client
    if client is None:
        raise NotCrawledHere(f"source {source} is crawled by {source.fetcher}")
    return client()


def job_seconds() -> float:
    """How long one crawl job fetches before it hands over to a fresh job (at the
    back of the queue, so delivery jobs queued meanwhile run first): well inside
    Q_TIMEOUT, which kills a job."""
    return max(min(60.0, settings.Q_TIMEOUT / 4), 2.0)


def crawl_workers_ensure(*, crawl: Crawl) -> int:
    """Queue fetch jobs for the crawl up to CRAWL_WORKERS (counting those already
    on the queue, or taken by a worker); returns how many were added. A sleeping
    crawl is woken now (its scheduled job would be one too many)."""
    crawl_wake_cancel(crawl=crawl)
    missing = settings.CRAWL_WORKERS - _jobs_queued().get(crawl.pk, 0)
    for _ in range(max(missing, 0)):
        crawl_job_enqueue(crawl=crawl)
    return max(missing, 0)


def crawl_job_enqueue(*, crawl: Crawl) -> None:
    async_task(CRAWL_TASK, crawl.pk, task_name=f"crawl {crawl.pk}")


def _wake_name(crawl: Crawl) -> str:
    return f"crawl {crawl.pk} wake"


def crawl_sleep(*, crawl: Crawl, seconds: float) -> None:
    """Nothing of the crawl can be fetched for ``seconds`` (hosts paused, URLs
    backing off): its job ends, and one is scheduled for then instead of a job
    queued again at once to find nothing again."""
    Schedule.objects.update_or_create(
        name=_wake_name(crawl),
        defaults={
            "func": CRAWL_TASK,
            "args": repr((crawl.pk,)),
            "schedule_type": Schedule.ONCE,
            "repeats": -1,
            "next_run": timezone.now() + timedelta(seconds=seconds),
        },
    )


def crawl_wake_cancel(*, crawl: Crawl) -> None:
    Schedule.objects.filter(name=_wake_name(crawl)).delete()


def crawl_is_sleeping(*, crawl: Crawl) -> bool:
    return Schedule.objects.filter(name=_wake_name(crawl)).exists()


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
    ctx = Context(
        crawl=crawl,
        fetcher=fetcher,
        scope=ScopeMap(),
        robots=RobotsCache(fetcher),
        # A delivery's rid says which fetcher got the page: "direct-<uuid>".
        rid_prefix=crawl.source.fetcher,
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
        claim = claims.frontier_claim(crawl=crawl)
        if claim is None:
            pause = claims.seconds_to_next(crawl=crawl)
            if pause is None:
                # Nothing queued: done, or the last URLs are with other workers
                # (whoever finishes the last one closes the crawl).
                crawl_finish_if_done(crawl=crawl)
                return "done"
            pause = max(pause, 0.2)
            if pause > job_seconds():
                crawl_sleep(crawl=crawl, seconds=pause)
                return "sleeping"
            if time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            continue
        if claim.give_up:
            url_fail(ctx, claim.row, claim.give_up)
            continue
        time.sleep(claim.wait)
        crawl_url_fetch(ctx=ctx, row=claim.row)
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
    """Every running crawl either closes (nothing left), sleeps until its job is
    due, or has its jobs on the queue: jobs lost to a crash or a purge are queued
    again. Returns how many jobs were queued."""
    added = 0
    for crawl in Crawl.objects.filter(state=Crawl.State.RUNNING):
        if crawl_is_sleeping(crawl=crawl):
            continue
        if not crawl_finish_if_done(crawl=crawl):
            added += crawl_workers_ensure(crawl=crawl)
    return added
