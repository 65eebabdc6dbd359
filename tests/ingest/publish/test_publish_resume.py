"""A check for changes works as a crawl does: in jobs of a few seconds, each
recording the sitemap files it read and queueing the next; a check whose job was
lost (a crash, a worker killed at a stop) is resumed with the running crawls, and
ends as one uninterrupted run would: no file recorded is read again, no page is
handed over twice, no count doubles."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase, override_settings
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signals import post_spawn

from ingest.publish.models import PublishCheck
from ingest.publish.services import (
    PUBLISH_TASK,
    publish_check_request,
    publish_check_run,
)
from ingest.pushing.models import Push
from ingest.tasks import running_resume_task
from kbsite.queue_broker import database_back
from sources.models import SYSTEM, Page, Source
from tests.conftest import at_once, each_at_once
from tests.fakes.site import FakeSite, sitemap_xml

EARLY = "2026-01-01"  # a sitemap's date before every check of these tests
MAPS = 3
# robots.txt, the index, its sitemaps and the one it lists that is missing.
FILES = 1 + 1 + MAPS + 1
SITE_SETTINGS = {
    "CRAWL_ALLOW_PRIVATE_ADDRESSES": True,
    "CRAWL_DELAY": 0,
    "CRAWL_TIMEOUT": 5,
}
FETCHERS = [Source.Fetcher.DIRECT, Source.Fetcher.CRAWLBASE]


def published_source(site: FakeSite, fetcher: str) -> Source:
    """robots.txt names an index of MAPS sitemaps (and one that is missing); each
    lists a page edited now, one dated long ago, one undated, and one new. The
    source has the others, checked three days ago, and a page no sitemap lists."""
    source = Source.objects.create(
        name=f"Docs {site.port}", seed_urls=site.url("/docs/"), fetcher=fetcher
    )
    site.robots(f"User-agent: *\nSitemap: {site.url('/index.xml')}\n")
    maps = [site.url(f"/map{n}.xml") for n in range(MAPS + 1)]
    site.add("/index.xml", sitemap_xml(maps, index=True))
    site.add(f"/map{MAPS}.xml", "", status=404)
    now = timezone.now()
    checked = now - timedelta(days=3)
    for n in range(MAPS):
        urls = {k: site.url(f"/docs/{n}/{k}/") for k in ["edited", "old", "undated"]}
        urls["new"] = site.url(f"/docs/{n}/new/")
        dates = {urls["edited"]: now.isoformat(), urls["old"]: EARLY}
        dates[urls["new"]] = now.isoformat()
        site.add(f"/map{n}.xml", sitemap_xml(list(urls.values()), lastmod=dates))
    known = [url for url in _listed(site) if not url.endswith("/new/")]
    for url in [*known, site.url("/docs/unlisted/")]:
        Page.objects.create(
            source=source, url=url, status=Page.Status.LIVE,
            last_verified_at=checked, next_crawl_at=checked + timedelta(days=7),
        )  # fmt: skip
    return source


def _listed(site: FakeSite) -> list[str]:
    kinds = ["edited", "old", "undated", "new"]
    return [site.url(f"/docs/{n}/{k}/") for n in range(MAPS) for k in kinds]


def check_jobs() -> list[OrmQ]:
    return [
        row for row in OrmQ.objects.order_by("id") if row.task["func"] == PUBLISH_TASK
    ]


def jobs_run(*, seconds: float | None) -> int:
    """Run the checks' queued jobs as a worker would, each for ``seconds``, and
    those they queue, until none is left: how many ran."""
    ran = 0
    while jobs := check_jobs():
        for row in jobs:
            row.delete()
            publish_check_run(check_id=row.task["args"][0], seconds=seconds)
            ran += 1
        assert ran < 50, "a check that never ends"
    return ran


def outcome(check: PublishCheck, site: FakeSite) -> dict[str, Any]:
    """What the check read and handed over, and what it says, in the site's paths."""
    check.refresh_from_db()
    if not check.fetcher.crawled_here:
        pushes = Push.objects.filter(page__source=check.source).order_by("pk")
        handed = list(pushes.values_list("url", flat=True))
    else:
        handed = list(check.crawl.urls.order_by("id").values_list("url", flat=True))
    origin = site.url("")
    return {
        "state": check.state,
        "summary": check.summary().replace(origin, ""),
        "handed": [url.removeprefix(origin) for url in handed],
        "entries kept": check.entries.count(),
        "read": site.paths(),
    }


@override_settings(**SITE_SETTINGS)
@pytest.mark.slow  # each fetcher's check of two fake sites
class SlicedCheckTests(TestCase):
    def twin_sites(self) -> tuple[FakeSite, FakeSite]:
        return self.enterContext(FakeSite()), self.enterContext(FakeSite())

    def request(self, source: Source) -> PublishCheck:
        with self.captureOnCommitCallbacks(execute=True):
            return publish_check_request(source=source, user=SYSTEM)[0]

    def uninterrupted(self, site: FakeSite, fetcher: str) -> dict[str, Any]:
        check = self.request(published_source(site, fetcher))
        assert jobs_run(seconds=None) == 1
        return outcome(check, site)

    def test_a_check_read_over_several_jobs_ends_as_one_uninterrupted_run(self):
        for fetcher in FETCHERS:
            with self.subTest(fetcher=fetcher):
                once, sliced = self.twin_sites()
                expected = self.uninterrupted(once, fetcher)
                check = self.request(published_source(sliced, fetcher))

                jobs = jobs_run(seconds=0)  # a file a job

                assert jobs == FILES
                assert outcome(check, sliced) == expected
                assert expected["state"] == PublishCheck.State.DONE
                assert expected["read"] == [
                    "/robots.txt", "/index.xml",
                    *[f"/map{n}.xml" for n in range(MAPS + 1)],
                ]  # fmt: skip
                assert expected["summary"].startswith(
                    f"4 sitemaps read (12 URLs in scope); could not read: "
                    f"/map{MAPS}.xml: HTTP 404."
                )
                assert len(expected["handed"]) == len(set(expected["handed"])) > MAPS

    def test_a_check_whose_job_was_lost_is_resumed_by_a_worker_starting(self):
        for fetcher in FETCHERS:
            with self.subTest(fetcher=fetcher):
                once, resumed = self.twin_sites()
                expected = self.uninterrupted(once, fetcher)
                check = self.request(published_source(resumed, fetcher))
                for _ in range(3):  # robots.txt, the index, the first sitemap
                    [job] = check_jobs()
                    job.delete()
                    publish_check_run(check_id=check.pk, seconds=0)

                # The worker died with the job it had queued for the rest.
                OrmQ.objects.all().delete()
                check.refresh_from_db()
                assert check.state == PublishCheck.State.RUNNING
                assert check.summary() == (
                    "Reading the sitemaps: 2 sitemaps read so far (4 URLs in scope)."
                )
                post_spawn.send(sender="django_q", proc_name="Process-restarted")

                assert len(check_jobs()) == 1
                assert jobs_run(seconds=0) == FILES - 3
                assert outcome(check, resumed) == expected


@pytest.mark.slow  # three threads reading a slow site
def test_copies_of_a_checks_job_at_once_record_each_file_once(
    transactional_db, settings
):
    """The queue may offer a killed worker's job again while the job the recovery
    queued runs: whichever records a file first goes on, the other stops."""
    for name, value in SITE_SETTINGS.items():
        setattr(settings, name, value)
    with FakeSite() as once, FakeSite() as copied:
        expected = _uninterrupted(once)
        source = published_source(copied, Source.Fetcher.CRAWLBASE)
        for route in copied.routes.values():
            route.slow = 0.1  # the copies overlap on each file
        check, _ = publish_check_request(source=source, user=SYSTEM)
        open_states = [PublishCheck.State.QUEUED, PublishCheck.State.RUNNING]

        def job_copy() -> None:
            connection.ensure_connection()
            while PublishCheck.objects.filter(pk=check.pk, state__in=open_states):
                publish_check_run(check_id=check.pk, seconds=0)

        at_once(job_copy, 3)
        got = outcome(check, copied)

    assert len(got.pop("read")) > FILES, "the copies read some files together"
    expected.pop("read")
    assert got == expected


def _uninterrupted(site: FakeSite) -> dict[str, Any]:
    check, _ = publish_check_request(
        source=published_source(site, Source.Fetcher.CRAWLBASE), user=SYSTEM
    )
    assert jobs_run(seconds=None) == 1
    return outcome(check, site)


RESUMERS = {
    "a worker starting": lambda: post_spawn.send(
        sender="django_q", proc_name="Process-test"
    ),
    "the schedule": running_resume_task,
    "the database back": lambda: database_back.send(sender=None),
}


@pytest.mark.parametrize(
    "callers",
    [
        ["a worker starting"] * 4,
        ["the schedule"] * 4,
        ["a worker starting", "the schedule", "the database back"] * 2,
    ],
    ids=["workers", "schedules", "mixed"],
)
def test_processes_resuming_checks_together_queue_each_lost_job_once(
    transactional_db, settings, callers
):
    """A running check whose next job was lost, and a queued one whose first job
    was: one job each; a check whose job waits gets none."""
    for name, value in SITE_SETTINGS.items():
        setattr(settings, name, value)
    with FakeSite() as running_site:
        running, _ = publish_check_request(
            source=published_source(running_site, Source.Fetcher.DIRECT), user=SYSTEM
        )
        publish_check_run(check_id=running.pk, seconds=0)
    queued, waiting = (
        publish_check_request(
            source=Source.objects.create(name=name, seed_urls=f"https://{name}/"),
            user=SYSTEM,
        )[0]
        for name in ["queued.example", "waiting.example"]
    )
    for job in check_jobs():
        if job.task["args"][0] != waiting.pk:
            job.delete()
    each_at_once([RESUMERS[caller] for caller in callers])

    jobs = sorted(job.task["args"][0] for job in check_jobs())
    assert jobs == sorted([running.pk, queued.pk, waiting.pk])
