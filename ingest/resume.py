"""Work picked up again. Running crawls and checks for changes: whenever a worker
process starts (a restart after a crash resumes them at once, not at the next run
of the schedule), every 10 minutes by the schedule, and (crawls) while ``manage.py
crawl`` waits. Deliveries, crawls and checks stranded by a database outage: as
soon as the cluster reads its queue again (``kbsite.queue_broker.database_back``),
not at the next sweep."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction

from ingest.crawl.jobs import crawls_resume
from ingest.crawl.models import Crawl
from ingest.delivery.queue import deliveries_requeue_stalled
from ingest.publish.services import publish_checks_resume
from sources.models import Source

logger = logging.getLogger(__name__)


def crawls_resume_locked() -> int:
    """Queue the jobs running crawls lack (``crawls_resume``), with the sources of
    running crawls locked first, as ``crawl_start`` locks the one it starts: two
    processes at it together (a cluster's workers starting, the schedule, a
    second start of the crawl) take turns, each counting the jobs the one before
    it queued, so no crawl gets more than CRAWL_WORKERS. Returns how many were
    queued."""
    with transaction.atomic():
        running = Crawl.objects.filter(state=Crawl.State.RUNNING).values("source_id")
        locked = Source.objects.select_for_update().filter(pk__in=running)
        list(locked.order_by("pk").values_list("pk", flat=True))
        return crawls_resume()


def running_resume() -> tuple[int, int]:
    """Queue the jobs running crawls and checks for changes lack: (crawl jobs,
    check jobs) queued."""
    return crawls_resume_locked(), publish_checks_resume()


def worker_started(sender: Any, proc_name: str, **kwargs: Any) -> None:
    """django-q2's ``post_spawn``, in each worker process it starts (or starts
    again): resume running crawls and checks before taking the first job."""
    try:
        crawls, checks = running_resume()
    except DatabaseError:
        # The schedule tries again; a worker must start whatever the database does.
        logger.exception("could not resume running crawls and checks at worker start")
        return
    if crawls or checks:
        logger.info(
            "%s resumed running crawls and checks: %s crawl jobs, %s check jobs queued",
            proc_name,
            crawls,
            checks,
        )


def database_back(sender: Any, **kwargs: Any) -> None:
    """``kbsite.queue_broker.database_back``, in the cluster's pusher: queue again
    the deliveries whose jobs failed in the outage or whose runs it cut off, and
    the jobs running crawls and checks lost, before the pusher takes the next job. The
    sweep's rules apply (a delivery a live run holds, or whose job waits, is left
    alone), so every worker node doing this at once queues each delivery once."""
    requeued = deliveries_requeue_stalled()
    crawls, checks = running_resume()
    logger.warning(
        "the database is back: %s deliveries queued again, %s crawl jobs and %s "
        "check jobs resumed",
        requeued,
        crawls,
        checks,
    )
