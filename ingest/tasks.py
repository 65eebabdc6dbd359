"""django-q2 entry points: they take ids, never payloads, and call one service."""

from __future__ import annotations

from ingest.crawl.jobs import crawl_work
from ingest.delivery.carry import deliveries_carry
from ingest.delivery.queue import deliveries_bodies_expire, deliveries_requeue_stalled
from ingest.delivery.rederive import source_pages_rederive, sources_boilerplate_refresh
from ingest.delivery.rescope import pages_rescope
from ingest.notify.services import (
    notifications_prune,
    notifications_send,
    notifications_send_soon,
)
from ingest.planning.recrawl import pushes_send_soon, recrawl_due
from ingest.planning.sitemap_seeds import source_sitemaps_push
from ingest.publish.services import publish_check_run
from ingest.pushing.services import PushingUnavailable, pushes_send
from ingest.resume import running_resume
from sources.models import Source

# One run sends for at most this long, then hands over to a fresh job, so that a
# long queue never runs into the job timeout (Q_TIMEOUT).
SEND_SECONDS = 120


def delivery_process_task(delivery_id: int) -> str | None:
    result = deliveries_carry(delivery_id=delivery_id)
    return None if result is None else str(result)


def deliveries_requeue_stalled_task() -> int:
    return deliveries_requeue_stalled()


def deliveries_bodies_expire_task() -> int:
    return deliveries_bodies_expire()


def source_pages_rederive_task(source_id: int, shapes: list[int] | None) -> int:
    source = Source.objects.filter(pk=source_id).first()
    return source_pages_rederive(source=source, shapes=shapes) if source else 0


def sources_boilerplate_refresh_task() -> int:
    return sources_boilerplate_refresh()


def pages_rescope_task() -> str:
    return str(pages_rescope())


def recrawl_due_task() -> str:
    return str(recrawl_due())


def crawl_work_task(crawl_id: int) -> str:
    return crawl_work(crawl_id=crawl_id)


def running_resume_task() -> str:
    crawls, checks = running_resume()
    return f"{crawls} crawl jobs, {checks} check jobs queued"


def source_sitemaps_push_task(source_id: int) -> str:
    source = Source.objects.filter(pk=source_id).first()
    if source is None:
        return "source gone"
    seeds, plan = source_sitemaps_push(source=source)
    return f"{seeds}; {plan}"


def pushes_send_task() -> str:
    try:
        report = pushes_send(seconds=SEND_SECONDS)
    except PushingUnavailable as exc:
        return str(exc)
    if report is None:
        return "another sender is at work"
    if report.waiting:
        pushes_send_soon()
    return str(report)


def publish_check_run_task(check_id: int) -> str:
    return publish_check_run(check_id=check_id)


def notifications_send_task() -> str:
    report = notifications_send()
    if report.more:
        notifications_send_soon()
    return str(report)


def notifications_prune_task() -> int:
    return notifications_prune()
