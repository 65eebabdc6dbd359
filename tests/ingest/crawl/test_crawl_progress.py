"""A crawl as the editor watching it sees it: fetched, indexed and left, the time
left from the rates seen, done only once its pages are indexed, and why it fetched
nothing, on the crawl and on the source's overview."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from ingest.crawl.jobs import CRAWL_TASK
from ingest.crawl.models import Crawl, CrawlHost, CrawlUrl
from ingest.crawl.progress import (
    Progress,
    Status,
    crawl_progress,
    duration_words,
    time_left,
)
from ingest.crawl.services import crawl_start, page_fetch_queue
from ingest.delivery.models import Delivery
from ingest.delivery.queue import TASK as DELIVERY_TASK
from ingest.planning.recrawl import recrawl_due
from sources.models import Page, Source
from tests.fakes.site import page
from tests.ingest.crawl.test_crawl import CrawlWorld, crawl_through
from tests.world import run_queued

Result = CrawlUrl.Result


@pytest.mark.parametrize(
    ("to_fetch", "to_index", "fetched", "indexed", "seconds", "expected"),
    [
        # Nothing left: no time left, whatever was seen.
        (0, 0, 0, 0, 0.0, timedelta(0)),
        # Too soon, or too few pages seen, to say.
        (40, 0, 30, 30, 10.0, None),
        (40, 0, 30, 4, 60.0, None),
        (40, 0, 4, 30, 60.0, None),
        # Fetching is the slower: 40 queued at 0.2 pages/s.
        (40, 0, 20, 40, 100.0, timedelta(seconds=200)),
        # Indexing is the slower: 41 queued and 20 fetched waiting, at 0.1/s.
        (41, 20, 60, 10, 100.0, timedelta(seconds=610)),
        # Only indexing is left: 26 deliveries at 13 a minute.
        (0, 26, 0, 13, 60.0, timedelta(seconds=120)),
    ],
)
def test_the_time_left_follows_the_slower_of_fetching_and_indexing(
    to_fetch, to_index, fetched, indexed, seconds, expected
):
    left = time_left(
        to_fetch=to_fetch,
        to_index=to_index,
        fetched=fetched,
        indexed=indexed,
        seconds=seconds,
    )

    assert left == expected


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (20, "less than a minute"),
        (240, "4 min"),
        (3600, "1 h"),
        (4800, "1 h 20 min"),
    ],
)
def test_a_time_left_is_said_in_minutes_and_hours(seconds, words):
    assert duration_words(timedelta(seconds=seconds)) == words


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(20, "less than a minute"), (59, "less than a minute"), (240, "about 4 min")],
)
def test_the_time_left_reads_as_words_that_parse(seconds, words):
    # 3 left, 6 indexed in the window: the time left is 3 × window / 6.
    progress = Progress(state="running", window=2.0 * seconds)
    progress.pages.update({"": 3, "fetched": 6})
    progress.deliveries.update({"embedded": 6})
    progress.fetched_recently = progress.indexed_recently = 6

    assert progress.time_left_words() == words


@pytest.mark.parametrize(
    ("state", "pages", "deliveries", "status", "left"),
    [
        ("running", {"": 41, "fetched": 106}, {"": 26, "embedded": 80}, "Fetching", 67),
        # Nothing left to fetch, but 26 deliveries wait for ingest: not done.
        ("done", {"fetched": 147}, {"": 26, "embedded": 121}, "Indexing", 26),
        ("done", {"fetched": 146, "failed": 1}, {"embedded": 146}, "Done", 0),
        # Every page it took in gave nothing: failed, not done.
        ("done", {"refused": 1}, {}, "Failed", 0),
        ("done", {"robots": 1, "scope": 3}, {}, "Failed", 0),
        ("cancelled", {"": 3, "fetched": 2}, {"embedded": 2}, "Cancelled", 3),
    ],
)
def test_a_crawl_is_done_only_once_what_it_fetched_is_indexed(
    state, pages, deliveries, status, left
):
    progress = Progress(state=state)
    progress.pages.update(pages)
    progress.deliveries.update(deliveries)

    assert (progress.status, progress.left) == (status, left)


def test_the_summary_counts_fetched_indexed_and_left_with_the_time_left():
    progress = Progress(state="running", window=300.0)
    progress.pages.update(
        {"": 41, "fetched": 100, "not_modified": 6, "robots": 3, "scope": 9}
    )
    progress.deliveries.update({"": 20, "embedded": 80, "unchanged": 6})
    progress.fetched_recently, progress.indexed_recently = 60, 30

    assert progress.summary() == (
        "fetched 106 of 150 · 3 skipped or failed · indexed 86 · 61 left (about 10 min)"
    )
    progress.indexed_recently = 2
    assert progress.summary().endswith("61 left (estimating…)")
    progress.fetched_recently = progress.indexed_recently = 0
    assert progress.summary().endswith("61 left (nothing moved in the last 5 minutes)")
    progress.waiting_behind = 1_200
    assert progress.summary().endswith(
        "61 left (waiting: the worker is indexing 1,200 pages of other crawls first)"
    )


class CrawlProgressTests(CrawlWorld):
    def test_a_crawl_fetched_but_not_indexed_is_indexing_then_done(self):
        self.site.add("/docs/", page("Docs", "Start.", ["a.html", "b.html"]))
        self.site.add("/docs/a.html", page("A", "Page A."))
        self.site.add("/docs/b.html", page("B", "Page B."))
        crawl, _ = crawl_start(source=self.source())

        for _ in range(10):
            run_queued(CRAWL_TASK)
        fetched = crawl_progress(crawl=crawl)

        assert fetched.state == Crawl.State.DONE, "nothing left to fetch"
        assert (fetched.status, fetched.fetched_count, fetched.indexed_count) == (
            Status.INDEXING, 3, 0
        )  # fmt: skip
        assert fetched.left == 3 and not fetched.finished
        assert fetched.summary().startswith("fetched 3 of 3 · indexed 0 · 3 left (")

        run_queued(DELIVERY_TASK)
        indexed = crawl_progress(crawl=crawl)

        assert (indexed.status, indexed.indexed_count, indexed.left) == (
            Status.DONE, 3, 0
        )  # fmt: skip
        assert indexed.summary() == "fetched 3 of 3 · indexed 3 · 0 left"

    def test_the_time_left_comes_from_the_pages_done_in_the_last_minutes(self):
        source = self.source()
        now = timezone.now()
        crawl = Crawl.objects.create(
            source=source, max_pages=100, max_depth=3,
            started_at=now - timedelta(hours=1),
        )  # fmt: skip
        hour_ago = now - timedelta(hours=1)  # before the window
        self.pages(crawl, 10, done_at=hour_ago, processed=hour_ago)
        self.pages(crawl, 30, done_at=now - timedelta(minutes=2), processed=now)
        self.pages(crawl, 10, done_at=now - timedelta(minutes=1), processed=None)
        self.pages(crawl, 60, done_at=None)

        progress = crawl_progress(crawl=crawl, now=now)

        # 40 fetched and 30 indexed in 5 minutes: the 70 left take 700 s to index.
        assert (progress.fetched_recently, progress.indexed_recently) == (40, 30)
        assert progress.time_left == timedelta(seconds=700)
        assert progress.summary() == (
            "fetched 50 of 110 · indexed 40 · 70 left (about 12 min)"
        )

    def test_a_crawl_just_started_is_estimating(self):
        crawl, _ = crawl_start(source=self.source())
        self.pages(crawl, 2, done_at=timezone.now(), processed=timezone.now())

        assert crawl_progress(crawl=crawl).summary() == (
            "fetched 2 of 3 · indexed 2 · 1 left (estimating…)"
        )

    def pages(
        self, crawl: Crawl, count: int, *, done_at, processed=None
    ) -> list[CrawlUrl]:
        rows = []
        for _ in range(count):
            n = CrawlUrl.objects.count()
            delivery = None
            if done_at is not None:
                delivery = Delivery.objects.create(
                    rid=f"direct-{crawl.pk}-{n}",
                    url=self.site.url(f"/docs/{n}"),
                    processed_at=processed,
                    outcome=Delivery.Outcome.EMBEDDED if processed else "",
                )
            rows.append(
                CrawlUrl.objects.create(
                    crawl=crawl,
                    url=self.site.url(f"/docs/{n}"),
                    origin=self.site.url("/").rstrip("/"),
                    state=CrawlUrl.State.DONE if done_at else CrawlUrl.State.QUEUED,
                    result=Result.FETCHED if done_at else "",
                    done_at=done_at,
                    delivery=delivery,
                )
            )
        return rows


@override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False)
class RefusedCrawlTests(CrawlWorld):
    """A source whose seed the address guard refuses, as an editor sees it."""

    def setUp(self) -> None:
        super().setUp()
        self.site.add("/docs/", page("Docs"))
        editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        self.client.force_login(editor)
        self.src = self.source()
        self.refused = self.crawl(self.src)

    def test_the_crawl_failed_and_says_why(self):
        listing = self.client.get(reverse("admin:ingest_crawl_changelist"))

        content = listing.content.decode()
        status = content.split('<td class="field-status">')[1].split("</td>")[0]
        assert status.startswith('<strong class="kb-warning">Failed</strong>')
        assert "a loopback address; set CRAWL_ALLOW_PRIVATE_ADDRESSES=true" in status
        assert self.site.paths() == []

    def test_the_sources_overview_shows_the_crawls_error_though_no_page_fails(self):
        assert not Page.objects.exists(), "a refused seed makes no page"
        url = reverse("admin:sources_source_change", args=[self.src.pk])

        content = self.client.get(url).content.decode()

        error = content.split("Last error:")[1].split("</div>")[0]
        assert self.site.url("/docs/") in error
        assert "a loopback address; set CRAWL_ALLOW_PRIVATE_ADDRESSES=true" in error
        row = self.refused.urls.get()
        assert reverse("admin:ingest_crawlurl_change", args=[row.pk]) in error
        shown = content.split("Crawl:")[1].split("</div>")[0]
        assert (
            "Failed</strong>" in shown
            and "fetched 0 of 1 · 1 skipped or failed" in shown
        )


class CrawlBesideAnIndexingOneTests(CrawlWorld):
    """A first crawl done fetching, its pages still waiting for ingest: the
    recrawl planner leaves them alone, and every screen says what is going on."""

    def setUp(self) -> None:
        super().setUp()
        self.site.redirect("/docs", "/docs/")
        self.site.add("/docs/", page("Docs", "Start.", ["a.html"]))
        self.site.add("/docs/a.html", page("A", "Page A."))
        editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        self.client.force_login(editor)
        self.src = self.source("/docs")
        self.first, _ = crawl_start(source=self.src)
        for _ in range(10):
            run_queued(CRAWL_TASK)

    def test_no_page_waiting_to_be_indexed_is_fetched_again(self):
        assert crawl_progress(crawl=self.first).status == Status.INDEXING
        waiting = Page.objects.due(now=timezone.now())
        assert waiting.exists(), "the seed asked for, pending until it is read"

        plan = recrawl_due()

        assert (plan.fetching, plan.indexing) == (0, waiting.count())
        assert "skipped (fetched, waiting to be indexed)" in str(plan)
        assert list(Crawl.objects.all()) == [self.first]
        run_queued(DELIVERY_TASK)
        assert recrawl_due().indexing == 0

    def test_a_page_whose_delivery_was_read_is_due_again_as_before(self):
        run_queued(DELIVERY_TASK)
        page = Page.objects.get(url=self.site.url("/docs/a.html"))
        Page.objects.filter(pk=page.pk).update(next_crawl_at=timezone.now())

        assert recrawl_due().fetching == 1

    def test_the_overview_shows_every_crawl_still_running_or_indexing(self):
        page_a = Page.objects.create(source=self.src, url=self.site.url("/docs/b"))
        page_fetch_queue(page_ids=[page_a.pk])  # a crawl of due pages, #2
        url = reverse("admin:sources_source_change", args=[self.src.pk])

        shown = self.client.get(url).content.decode().split("Crawl:")[1]
        shown = shown.split("Last error:")[0]

        assert shown.count("<strong>Indexing</strong>") == 1
        assert shown.count("<strong>Fetching</strong>") == 1
        assert 'data-live="1"' in shown
        crawl_through(Crawl.objects.get(kind=Crawl.Kind.PAGES))
        run_queued(DELIVERY_TASK)
        done = self.client.get(url).content.decode().split("Crawl:")[1]
        done = done.split("Last error:")[0]
        assert done.count("<strong>Done</strong>") == 1, "the latest alone"
        assert 'data-live=""' in done

    def test_the_crawls_list_has_one_clock_for_fetching_and_one_for_indexing(self):
        listing = reverse("admin:ingest_crawl_changelist")

        def cell(name: str) -> str:
            content = self.client.get(listing).content.decode()
            return content.split(f'<td class="field-{name}">')[1].split("</td>")[0]

        assert cell("status") == "<strong>Indexing</strong>"
        assert cell("indexed_at") == "indexing…"
        assert cell("fetched_at") not in ("", "-", "fetching…")
        run_queued(DELIVERY_TASK)
        assert cell("status") == "<strong>Done</strong>"
        assert cell("indexed_at") not in ("indexing…", "—")


class OverviewProgressTests(CrawlWorld):
    def test_the_sources_overview_shows_its_crawl_indexing_then_done(self):
        self.site.add("/docs/", page("Docs", "Start.", ["a.html"]))
        self.site.add("/docs/a.html", page("A", "Page A."))
        editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        self.client.force_login(editor)
        source = self.source()
        crawl_start(source=source)
        url = reverse("admin:sources_source_change", args=[source.pk])
        for _ in range(10):
            run_queued(CRAWL_TASK)

        indexing = self.client.get(url).content.decode().split("Crawl:")[1]
        crawl_through(Crawl.objects.get())
        done = self.client.get(url).content.decode().split("Crawl:")[1]

        assert "<strong>Indexing</strong>" in indexing
        assert "fetched 2 of 2 · indexed 0 · 2 left (estimating…)" in indexing
        assert "<strong>Done</strong>" in done
        assert "fetched 2 of 2 · indexed 2 · 0 left" in done
        last_error = self.client.get(url).content.decode().split("Last error:")[1]
        assert "None: no page is failing" in last_error

    def test_a_crawlbase_source_says_who_crawls_it(self):
        editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        self.client.force_login(editor)
        source = self.source(fetcher=Source.Fetcher.CRAWLBASE)

        content = self.client.get(
            reverse("admin:sources_source_change", args=[source.pk])
        ).content.decode()

        assert "Crawlbase crawls this source" in content.split("Crawl:")[1]


class SeedErrorTests(CrawlWorld):
    """What only a fetch can tell shows on the overview once the crawl ran."""

    def setUp(self) -> None:
        super().setUp()
        editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        self.client.force_login(editor)

    def test_a_seed_the_site_refuses_or_robots_txt_disallows_is_the_last_error(self):
        for name, arrange, reason in [
            ("403", lambda: self.site.add("/docs/", "", status=403),
             "the site answered 403"),
            ("robots", lambda: self.site.robots("User-agent: *\nDisallow: /docs/\n"),
             f"robots.txt disallows {self.site.url('/docs/')}"),
        ]:  # fmt: skip
            with self.subTest(name):
                Source.objects.all().delete()
                CrawlHost.objects.all().delete()  # robots.txt is kept a day
                self.site.add("/docs/", page("Docs"))
                self.site.robots("")
                arrange()
                source = self.source()
                crawl = self.crawl(source)

                content = self.client.get(
                    reverse("admin:sources_source_change", args=[source.pk])
                ).content.decode()

                assert crawl_progress(crawl=crawl).status == Status.FAILED
                assert reason in content.split("Last error:")[1].split("</div>")[0]
