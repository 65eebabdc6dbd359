"""Running crawls picked up again: whenever a worker process starts (a restart
after a crash resumes them at once, not at the next run of the schedule), every
10 minutes by the schedule, and while ``manage.py crawl`` waits."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction

from ingest.crawl.jobs import crawls_resume
from ingest.models import Crawl
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


def worker_started(sender: Any, proc_name: str, **kwargs: Any) -> None:
    """django-q2's ``post_spawn``, in each worker process it starts (or starts
    again): resume running crawls before taking the first job."""
    try:
        queued = crawls_resume_locked()
    except DatabaseError:
        # The schedule tries again; a worker must start whatever the database does.
        logger.exception("could not resume running crawls at worker start")
        return
    if queued:
        logger.info("%s resumed running crawls: %s jobs queued", proc_name, queued)
