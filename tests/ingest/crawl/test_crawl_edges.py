"""The built-in crawler against sites that send what no site should: URLs nothing
can request, waits of centuries, a robots.txt over the body limit; and one crawl
of a source at a time."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from django_q.models import OrmQ, Schedule

from ingest.crawl import fetch
from ingest.crawl.jobs import CRAWL_TASK, crawl_work
from ingest.crawl.models import Crawl, CrawlHost, CrawlUrl
from ingest.crawl.progress import crawl_progress
from ingest.crawl.services import crawl_start, page_fetch_queue
from ingest.fetchers import safety
from sources.models import Page, Source
from tests.fakes.site import FakeSite, page, sitemap_xml
from tests.world import run_queued

pytestmark = pytest.mark.django_db

# A day, as the default; set here so the tests hold whatever the default becomes.
MAX_DELAY = 86400


@pytest.fixture(autouse=True)
def crawl_settings(settings):
    settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = True
    settings.CRAWL_DELAY = 0
    settings.CRAWL_RETRY_SECONDS = 0
    settings.CRAWL_TIMEOUT = 5
    settings.CRAWL_WORKERS = 1
    settings.CRAWL_MAX_DELAY = MAX_DELAY
    return settings


def docs_site(site: FakeSite) -> FakeSite:
    site.robots("")
    site.add("/sitemap.xml", "", status=404)
    site.add("/docs/a.html", page("A", "A page of the manual."))
    return site


@pytest.fixture
def site():
    with FakeSite() as served:
        yield docs_site(served)


def crawl_jobs_run(crawl: Crawl, times: int = 30) -> Crawl:
    """Run the crawl's fetch jobs (not the delivery jobs) until none is queued."""
    for _ in range(times):
        if not run_queued(CRAWL_TASK):
            break
    crawl.refresh_from_db()
    return crawl


def row_of(crawl: Crawl, url: str) -> CrawlUrl:
    return crawl.urls.get(url=url)


# -- 4. a URL nothing can request fails alone ------------------------------------

BAD_URLS = ["http://[::1", "http://0177.0.0.1/", "http://①②⑦.0.0.1/"]

# Where a site hands the crawler a URL, and whose row carries the failure
# ("" when the URL itself is dropped or fails on its own row).
ENTRY_POINTS = [
    "a redirect",
    "a link",
    "a canonical link",
    "a sitemap entry",
    "a robots.txt redirect",
    "a sitemap redirect",
]


def sites_handing_out(bad: str, entry: str, main: FakeSite, other: FakeSite) -> dict:
    """Set up ``main`` (the seed /docs/) to hand out ``bad`` through ``entry``;
    returns the source's fields."""
    links = ["a.html"]
    fields: dict = {"allow_patterns": "^http://"}
    if entry == "a redirect":
        main.redirect("/docs/go", bad)
        links.append("go")
    elif entry == "a link":
        links.append(bad)
    elif entry == "a canonical link":
        head = f'<link rel="canonical" href="{bad}">'
        main.add("/docs/b.html", page("B", "Says it is elsewhere.", head=head))
        links.append("b.html")
    elif entry == "a sitemap entry":
        main.add("/map.xml", sitemap_xml([bad, main.url("/docs/a.html")]))
        fields["sitemap_url"] = main.url("/map.xml")
    elif entry == "a robots.txt redirect":
        other.redirect("/robots.txt", bad)
        other.add("/x.html", page("X"))
        links.append(other.url("/x.html"))
    elif entry == "a sitemap redirect":
        main.redirect("/map.xml", bad)
        fields["sitemap_url"] = main.url("/map.xml")
    main.add("/docs/", page("Docs", "Start.", links))
    return fields


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("bad", BAD_URLS)
def test_a_url_nothing_can_request_fails_alone_and_the_crawl_goes_on(
    bad, entry, crawl_settings
):
    # Addresses are checked: the sites play public servers on 127.0.0.2 and
    # 127.0.0.3, so what a bad URL may turn into (127.0.0.1) is refused.
    crawl_settings.CRAWL_ALLOW_PRIVATE_ADDRESSES = False
    real = safety.address_refusal

    def pretend(address: str) -> str | None:
        return None if address in {"127.0.0.2", "127.0.0.3"} else real(address)

    with contextlib.ExitStack() as stack:
        main = stack.enter_context(FakeSite(host="127.0.0.2"))
        # A second host only where one is needed (each takes time to shut down).
        other = FakeSite(host="127.0.0.3")
        if entry == "a robots.txt redirect":
            stack.enter_context(other)
        stack.enter_context(
            mock.patch.object(safety, "address_refusal", side_effect=pretend)
        )
        docs_site(main)
        fields = sites_handing_out(bad, entry, main, other)
        source = Source.objects.create(
            name="Docs", seed_urls=main.url("/docs/"), **fields
        )
        crawl, _ = crawl_start(source=source)
        crawl = crawl_jobs_run(crawl)

    assert crawl.state == Crawl.State.DONE
    assert not crawl.urls.open().exists(), "no URL is left fetching or queued"
    assert row_of(crawl, main.url("/docs/a.html")).result == "fetched"
    failed = {CrawlUrl.Result.FAILED, CrawlUrl.Result.REFUSED}
    if entry == "a redirect":
        go = row_of(crawl, main.url("/docs/go"))
        assert go.result in failed and go.error
    elif entry == "a canonical link":
        # Delivered as itself, or refused where the link leads (127.0.0.1).
        b = row_of(crawl, main.url("/docs/b.html"))
        assert b.result == "fetched" or (b.result in failed and b.error)
    elif entry == "a robots.txt redirect":
        x = row_of(crawl, other.url("/x.html"))
        assert x.result in failed and "robots.txt" in x.error
    elif entry == "a sitemap redirect":
        sitemap = row_of(crawl, main.url("/map.xml"))
        assert sitemap.result in failed and sitemap.error


def test_an_unexpected_error_fails_its_url_with_the_error_and_the_crawl_goes_on(
    site,
):
    site.add("/docs/", page("Docs", "Start.", ["a.html", "b.html"]))
    site.add("/docs/b.html", page("B", "Breaks the crawler."))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)
    real = fetch.page_deliver

    def deliver(ctx, row, reached):
        if row.url.endswith("/b.html"):
            raise RuntimeError("the parser fell over")
        return real(ctx, row, reached)

    with mock.patch.object(fetch, "page_deliver", side_effect=deliver):
        crawl = crawl_jobs_run(crawl)

    assert crawl.state == Crawl.State.DONE
    broken = row_of(crawl, site.url("/docs/b.html"))
    assert broken.result == "failed"
    assert "RuntimeError: the parser fell over" in broken.error
    assert row_of(crawl, site.url("/docs/a.html")).result == "fetched"


@pytest.mark.parametrize(
    "state", [CrawlUrl.State.FETCHING, CrawlUrl.State.QUEUED], ids=["leased", "queued"]
)
def test_a_url_whose_attempts_are_spent_fails_when_claimed_without_a_request(
    site, crawl_settings, state
):
    """A worker that dies on a URL (killed, out of memory) leaves it claimed; after
    the lease it is claimed again, but not beyond CRAWL_RETRIES."""
    crawl_settings.CRAWL_RETRIES = 2
    site.add("/docs/", page("Docs", "Start.", ["a.html"]))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)
    crawl.urls.filter(url=site.url("/docs/")).update(
        state=state,
        attempts=3,
        claimed_at=timezone.now() - timedelta(hours=1),
        error="the worker was stopped",
    )

    crawl = crawl_jobs_run(crawl)

    assert site.requested("/docs/") == 0
    spent = row_of(crawl, site.url("/docs/"))
    assert spent.state == CrawlUrl.State.DONE and spent.result == "failed"
    assert "3 attempts" in spent.error
    assert crawl.state == Crawl.State.DONE


# -- 5. a site asking for centuries ----------------------------------------------


@pytest.mark.parametrize(
    "retry_after", ["99999999999", "Fri, 31 Dec 9999 23:59:59 GMT"], ids=["s", "date"]
)
def test_a_retry_after_beyond_the_cap_pauses_the_host_for_the_cap_with_the_reason(
    site, retry_after
):
    site.add("/docs/", "busy", status=503, headers={"Retry-After": retry_after})
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)

    crawl_jobs_run(crawl)

    latest = timezone.now() + timedelta(seconds=MAX_DELAY)
    host = CrawlHost.objects.get()
    assert timezone.now() < host.next_fetch_at <= latest
    assert row_of(crawl, site.url("/docs/")).not_before <= latest
    assert "Retry-After" in host.pause_reason and "CRAWL_MAX_DELAY" in host.pause_reason
    assert host.pause_reason in crawl_progress(crawl=crawl).counts()


@pytest.mark.parametrize(
    "rule", ["Crawl-delay: 99999999999", "Request-rate: 1/99999999999s"]
)
def test_a_robots_delay_beyond_the_cap_is_cut_to_it_with_the_reason(site, rule):
    site.robots(f"User-agent: *\n{rule}\n")
    site.add("/docs/", page("Docs", "Start.", ["a.html"]))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)

    crawl_jobs_run(crawl)

    host = CrawlHost.objects.get()
    assert host.delay == MAX_DELAY
    assert host.next_fetch_at <= timezone.now() + timedelta(seconds=MAX_DELAY)
    assert rule.split(":")[0] in host.pause_reason
    assert host.pause_reason in crawl_progress(crawl=crawl).counts()
    assert site.requested("/docs/a.html") == 0, "the next request waits a day"


def test_a_crawl_with_nothing_fetchable_sleeps_until_its_next_due_time(site):
    site.add("/docs/", page("Docs", "Start."))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)
    due = timezone.now() + timedelta(hours=2)
    crawl.urls.update(not_before=due)
    run_queued(CRAWL_TASK)  # the job queued by the start

    assert crawl_work(crawl_id=crawl.pk) == "sleeping"

    assert not OrmQ.objects.exists(), "no job re-queued to spin"
    wake = Schedule.objects.get(func=CRAWL_TASK)
    assert abs((wake.next_run - due).total_seconds()) < 5
    assert wake.schedule_type == Schedule.ONCE


def test_urls_joining_a_sleeping_crawl_wake_it_once(site):
    site.add("/docs/", page("Docs", "Start."))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)
    crawl.urls.update(not_before=timezone.now() + timedelta(hours=2))
    run_queued(CRAWL_TASK)
    assert Schedule.objects.filter(func=CRAWL_TASK).count() == 1

    crawl_start(source=source, seeds=[site.url("/docs/a.html")])

    assert not Schedule.objects.filter(func=CRAWL_TASK).exists()
    assert [row.task["func"] for row in OrmQ.objects.all()] == [CRAWL_TASK]
    crawl = crawl_jobs_run(crawl)
    assert row_of(crawl, site.url("/docs/a.html")).result == "fetched"
    assert Schedule.objects.filter(func=CRAWL_TASK).count() == 1, "asleep again"


# -- 9. one crawl of a source at a time ------------------------------------------


@pytest.mark.parametrize("first", ["site crawl", "due pages"])
def test_a_source_has_one_running_crawl_and_due_pages_join_it(site, first):
    site.add("/docs/", page("Docs", "Start.", ["a.html"]))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    due = Page.objects.create(source=source, url=site.url("/docs/a.html"))

    if first == "site crawl":
        crawl_start(source=source)
        page_fetch_queue(page_ids=[due.pk])
    else:
        page_fetch_queue(page_ids=[due.pk])
        crawl_start(source=source)

    running = Crawl.objects.filter(source=source, state=Crawl.State.RUNNING)
    assert running.count() == 1
    crawl = running.get()
    assert crawl.kind == Crawl.Kind.SITE
    assert set(crawl.urls.values_list("url", flat=True)) >= {
        site.url("/docs/"),
        site.url("/docs/a.html"),
    }
    crawl = crawl_jobs_run(crawl)
    assert crawl.state == Crawl.State.DONE
    assert site.requested("/docs/a.html") == 1


# -- 10. a robots.txt over the body limit ----------------------------------------


def test_the_first_500_kib_of_a_robots_txt_over_the_body_limit_are_obeyed(
    site, crawl_settings
):
    crawl_settings.CRAWL_MAX_BODY_BYTES = 2048
    rules = "User-agent: *\nDisallow: /docs/private/\n"
    padding = "# " + "x" * 97 + "\n"
    late = "Disallow: /docs/\n"  # past 500 KiB: not read, as RFC 9309 allows
    site.robots(rules + padding * 6000 + late)
    site.add("/docs/", page("Docs", "Start.", ["private/p.html", "a.html"]))
    site.add("/docs/private/p.html", page("Private"))
    source = Source.objects.create(name="Docs", seed_urls=site.url("/docs/"))
    crawl, _ = crawl_start(source=source)

    crawl = crawl_jobs_run(crawl)

    assert row_of(crawl, site.url("/docs/")).result == "fetched"
    assert row_of(crawl, site.url("/docs/a.html")).result == "fetched"
    assert row_of(crawl, site.url("/docs/private/p.html")).result == "robots"
    assert site.requested("/docs/private/p.html") == 0
    assert site.requested("/robots.txt") == 1
