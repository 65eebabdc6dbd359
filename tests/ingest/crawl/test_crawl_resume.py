"""Running crawls picked up again: at once when a worker cluster starts (not at
the schedule's next run), and never twice when processes resume together."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone
from django_q.models import OrmQ, Schedule
from django_q.signals import post_spawn

from ingest.crawl.jobs import CRAWL_TASK
from ingest.crawl.models import Crawl
from ingest.crawl.services import crawl_start
from ingest.tasks import running_resume_task
from sources.models import Source
from tests.conftest import each_at_once
from tests.fakes.site import FakeSite
from tests.ingest.crawl.test_crawl_worker import cluster, docs_site
from tests.ingest.delivery.test_worker import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def crawl_jobs() -> int:
    return sum(row.task["func"] == CRAWL_TASK for row in OrmQ.objects.all())


def lose_the_jobs_in_a_crash() -> None:
    """The crawl's job went with the crash, and the schedule that resumes crawls
    ran just before it: its next run is minutes away."""
    OrmQ.objects.all().delete()
    Schedule.objects.update(next_run=timezone.now() + timedelta(hours=1))


@pytest.mark.slow
def test_a_worker_cluster_starting_resumes_a_running_crawl_at_once():
    with FakeSite() as site:
        docs_site(site, 3)
        source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
        crawl, _ = crawl_start(source=source)
        lose_the_jobs_in_a_crash()

        with cluster():
            wait_until(
                lambda: Crawl.objects.get(pk=crawl.pk).state == Crawl.State.DONE,
                60,
                "the crawl to be resumed and finish",
            )

    assert set(site.paths()) >= {"/docs/", "/docs/p0.html", "/docs/p2.html"}


ENTRY_POINTS = {
    "a worker starting": lambda source: post_spawn.send(
        sender="django_q", proc_name="Process-test"
    ),
    "the schedule": lambda source: running_resume_task(),
    "a second start of the crawl": lambda source: crawl_start(source=source),
}


@pytest.mark.parametrize(
    "callers",
    [
        ["a worker starting"] * 4,
        ["the schedule"] * 4,
        ["a worker starting", "the schedule", "a second start of the crawl"] * 2,
    ],
    ids=["workers", "schedules", "mixed"],
)
def test_processes_resuming_a_crawl_together_queue_its_job_once(callers):
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example.com/")
    crawl_start(source=source)
    lose_the_jobs_in_a_crash()
    # Every process has its connection before any of them counts the jobs.
    each_at_once([partial(ENTRY_POINTS[caller], source) for caller in callers])

    assert crawl_jobs() == 1  # CRAWL_WORKERS
