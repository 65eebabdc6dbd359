"""The built-in crawler against a small site on loopback: discovery, politeness,
identity of URLs and content, conditional requests and address safety."""

from __future__ import annotations

import gzip
import re
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.test import TestCase, override_settings
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ

from ingest.crawl.claims import frontier_claim
from ingest.crawl.jobs import CRAWL_TASK
from ingest.crawl.models import Crawl, CrawlHost, CrawlUrl
from ingest.crawl.progress import crawl_progress
from ingest.crawl.services import crawl_start, page_fetch_queue
from ingest.delivery.models import Delivery
from ingest.delivery.queue import TASK as DELIVERY_TASK
from ingest.fetchers import safety
from ingest.planning.recrawl import pages_recrawl
from ingest.pushing.models import Push
from retrieval.models import Chunk, Embedding
from sources.models import Page, Source
from tests.fakes.site import FakeSite, page, sitemap_xml
from tests.world import run_queued

LONG = " ".join(
    f"Sentence {n} explains how workers take jobs from the queue in order."
    for n in range(60)
)


def crawl_through(crawl: Crawl) -> Crawl:
    """Run the crawl's jobs and the delivery jobs they queue, as workers would,
    until nothing is left on the queue."""
    for _ in range(30):
        run_queued(CRAWL_TASK)
        run_queued(DELIVERY_TASK)
        if not OrmQ.objects.exists():
            break
    crawl.refresh_from_db()
    return crawl


@override_settings(
    CRAWL_ALLOW_PRIVATE_ADDRESSES=True,
    CRAWL_DELAY=0,
    CRAWL_RETRY_SECONDS=0,
    CRAWL_TIMEOUT=5,
    CRAWL_WORKERS=1,
)
class CrawlWorld(TestCase):
    """A documentation site under /docs/ with its own robots.txt."""

    def setUp(self) -> None:
        self.site = self.enterContext(FakeSite())
        self.site.robots("User-agent: *\nDisallow: /private/\n")
        self.site.add("/sitemap.xml", "", status=404)

    def source(self, path: str = "/docs/", **fields: object) -> Source:
        return Source.objects.create(
            name="Docs", seed_urls=self.site.url(path), **fields
        )

    def crawl(self, source: Source, **limits: int) -> Crawl:
        crawl, _ = crawl_start(source=source, **limits)
        return crawl_through(crawl)

    def live_urls(self) -> set[str]:
        live = Page.objects.filter(status=Page.Status.LIVE)
        return set(live.values_list("url", flat=True))

    def result(self, crawl: Crawl, path: str) -> CrawlUrl:
        return crawl.urls.get(url=self.site.url(path))


class DiscoveryTests(CrawlWorld):
    def test_it_indexes_the_pages_linked_from_the_seed(self):
        self.site.add("/docs/", page("Docs", LONG, ["a.html", "b.html"]))
        self.site.add("/docs/a.html", page("Queues", "Queues hold jobs."))
        self.site.add("/docs/b.html", page("Workers", "Workers run jobs."))

        crawl = self.crawl(self.source())

        assert crawl.state == Crawl.State.DONE
        assert self.live_urls() == {
            self.site.url("/docs/"),
            self.site.url("/docs/a.html"),
            self.site.url("/docs/b.html"),
        }
        assert Chunk.objects.filter(page__url=self.site.url("/docs/a.html")).exists()
        progress = crawl_progress(crawl=crawl)
        assert progress.pages["fetched"] == 3
        assert progress.deliveries == {"embedded": 3}

    def test_it_reads_the_sitemaps_robots_txt_names_and_their_index(self):
        self.site.robots(f"User-agent: *\nSitemap: {self.site.url('/index.xml.gz')}\n")
        index = sitemap_xml([self.site.url("/pages.xml")], index=True)
        self.site.add("/index.xml.gz", gzip.compress(index.encode()))
        self.site.add("/pages.xml", sitemap_xml([self.site.url("/docs/hidden.html")]))
        self.site.add("/docs/", page("Docs", "No links here."))
        self.site.add("/docs/hidden.html", page("Hidden", "Only the sitemap knows."))

        crawl = self.crawl(self.source())

        assert self.site.url("/docs/hidden.html") in self.live_urls()
        hidden = self.result(crawl, "/docs/hidden.html")
        assert hidden.lastmod is not None, "the sitemap's lastmod is kept"
        page_row = Page.objects.get(url=self.site.url("/docs/hidden.html"))
        assert page_row.site_modified_at == hidden.lastmod
        assert crawl_progress(crawl=crawl).sitemaps["fetched"] == 2

    def test_a_known_page_the_sitemap_dates_after_its_last_check_is_due(self):
        # The crawl has room for the seed only; the page the sitemap lists was
        # checked before the sitemap's date (2026-11-01), so it is due at once.
        self.site.robots(f"User-agent: *\nSitemap: {self.site.url('/map.xml')}\n")
        self.site.add("/map.xml", sitemap_xml([self.site.url("/docs/old.html")]))
        self.site.add("/docs/", page("Docs", "No links here."))
        source = self.source()
        old = Page.objects.create(
            source=source, url=self.site.url("/docs/old.html"),
            status=Page.Status.LIVE,
            last_verified_at=timezone.now() - timedelta(days=60),
            next_crawl_at=timezone.now() + timedelta(days=5),
        )  # fmt: skip

        self.crawl(source, max_pages=1)

        old.refresh_from_db()
        assert self.site.requested("/docs/old.html") == 0
        assert old.next_crawl_at <= timezone.now()
        assert old.site_modified_at is not None

    def test_links_out_of_scope_are_not_followed(self):
        other = self.enterContext(FakeSite())
        other.add("/", page("Elsewhere"))
        links = [other.url("/"), "/docs/genindex.html", "/docs/in.html", "x.pdf"]
        self.site.add("/docs/", page("Docs", "Start.", links))
        self.site.add("/docs/in.html", page("In", "In scope."))
        self.site.add("/docs/genindex.html", page("Index", "Generated."))

        crawl = self.crawl(self.source(deny_patterns=r"/genindex\.html$"))

        assert other.paths() == []
        assert self.site.requested("/docs/genindex.html") == 0
        assert self.site.requested("/docs/x.pdf") == 0
        assert self.result(crawl, "/docs/in.html").result == "fetched"
        assert self.result(crawl, "/docs/genindex.html").result == "scope"
        assert crawl.urls.get(url=other.url("/")).result == "scope"
        assert self.result(crawl, "/docs/x.pdf").result == "type"

    def test_a_url_belongs_to_the_most_specific_source_and_only_it_fetches_it(self):
        self.site.add("/docs/", page("Docs", "Start.", ["api/", "guide/"]))
        self.site.add("/docs/api/", page("API", "Reference."))
        self.site.add("/docs/guide/", page("Guide", "How-to."))
        Source.objects.create(name="API", seed_urls=self.site.url("/docs/api/"))

        crawl = self.crawl(self.source())

        assert self.result(crawl, "/docs/api/").result == "scope"
        assert self.site.requested("/docs/api/") == 0

    def test_a_broken_link_makes_no_page(self):
        self.site.add("/docs/", page("Docs", "Start.", ["missing.html"]))

        crawl = self.crawl(self.source())

        assert self.result(crawl, "/docs/missing.html").result == "gone"
        assert not Page.objects.filter(url__endswith="missing.html").exists()

    def test_limits_of_pages_and_depth_are_kept(self):
        self.site.add("/docs/", page("Docs", "Start.", ["1.html", "2.html", "3.html"]))
        for n in range(1, 4):
            self.site.add(f"/docs/{n}.html", page(f"P{n}", "Text.", [f"deep{n}.html"]))
            self.site.add(f"/docs/deep{n}.html", page(f"D{n}", "Deep."))

        crawl = self.crawl(self.source(), max_depth=1, max_pages=3)

        assert crawl.urls.admitted().count() == 3
        assert not any("deep" in path for path in self.site.paths())


class PolitenessTests(CrawlWorld):
    def test_robots_txt_disallow_is_obeyed_also_behind_a_redirect(self):
        self.site.add("/docs/", page("Docs", "Start.", ["/private/a.html", "go"]))
        self.site.redirect("/docs/go", "/private/secret.html")
        self.site.add("/private/a.html", page("Private"))
        self.site.add("/private/secret.html", page("Secret"))
        whole_site = "^" + re.escape(self.site.url("/"))

        crawl = self.crawl(self.source("/docs/", allow_patterns=whole_site))

        assert self.site.requested("/private/a.html") == 0
        assert self.site.requested("/private/secret.html") == 0
        assert self.site.requested("/docs/go") == 1, "the hop itself was allowed"
        assert self.result(crawl, "/private/a.html").result == "robots"
        go = self.result(crawl, "/docs/go")
        assert go.result == "robots" and "secret.html" in go.error

    def test_every_request_names_the_crawler_and_its_contact(self):
        self.site.add("/docs/", page("Docs", "Start."))

        with override_settings(CRAWL_CONTACT_URL="https://kb.example.com/bot"):
            self.crawl(self.source())

        agents = {hit.headers["User-Agent"] for hit in self.site.hits}
        assert agents == {
            "Mozilla/5.0 (compatible; kb-crawler/1.0; +https://kb.example.com/bot)"
        }

    def test_robots_txt_crawl_delay_spaces_the_requests(self):
        self.site.robots("User-agent: *\nCrawl-delay: 0.15\n")
        self.site.add("/docs/", page("Docs", "Start.", ["a.html", "b.html"]))
        self.site.add("/docs/a.html", page("A"))
        self.site.add("/docs/b.html", page("B"))

        self.crawl(self.source())

        assert CrawlHost.objects.get().delay == 0.15
        assert min(self.gaps_after_answers()) >= 0.14

    def test_a_crawl_delay_runs_from_the_end_of_a_slow_answer(self):
        self.site.robots("User-agent: *\nCrawl-delay: 0.15\n")
        self.slow_answers_are_spaced(override_settings(CRAWL_DELAY=0))

    def test_the_crawl_delay_setting_runs_from_the_end_of_a_slow_answer(self):
        self.site.robots("User-agent: *\n")
        self.slow_answers_are_spaced(override_settings(CRAWL_DELAY=0.15))

    def slow_answers_are_spaced(self, delay):
        # A site answering in 0.1 s with a 0.15 s delay: each request starts
        # 0.15 s after the last answer ended, not 0.05 s (0.15 s after it began).
        links = ["a.html", "b.html"]
        self.site.add("/docs/", page("Docs", "Start.", links), slow=0.1)
        self.site.add("/docs/a.html", page("A"), slow=0.1)
        self.site.add("/docs/b.html", page("B"), slow=0.1)

        with delay:
            self.crawl(self.source())

        gaps = self.gaps_after_answers()
        assert len(gaps) == 2 and min(gaps) >= 0.14, gaps

    def gaps_after_answers(self) -> list[float]:
        """Seconds from the end of each answer to the next page request."""
        hits = [hit for hit in self.site.hits if hit.path.startswith("/docs/")]
        assert len(hits) == 3 and all(hit.ended for hit in hits)
        return [
            later.at - earlier.ended
            for earlier, later in zip(hits, hits[1:], strict=False)
        ]

    def test_a_host_with_its_requests_running_takes_no_more(self):
        crawl, _ = crawl_start(source=self.source())  # /docs/ is queued
        origin = f"http://127.0.0.1:{self.site.port}"
        for path in ["/a", "/b"]:
            CrawlUrl.objects.create(
                crawl=crawl,
                url=self.site.url(path),
                origin=origin,
                state=CrawlUrl.State.FETCHING,
                claimed_at=timezone.now(),
            )

        with override_settings(CRAWL_HOST_CONCURRENCY=2):
            assert frontier_claim(crawl=crawl) is None
        with override_settings(CRAWL_HOST_CONCURRENCY=3):
            claim = frontier_claim(crawl=crawl)
        assert claim.row.url == self.site.url("/docs/") and claim.wait == 0

    @pytest.mark.slow  # waits out CRAWL_TIMEOUT, a second at least
    def test_a_site_too_slow_to_answer_times_out(self):
        self.site.add("/docs/", page("Docs"), hold=True)

        with override_settings(CRAWL_TIMEOUT=1, CRAWL_RETRIES=0):
            crawl = self.crawl(self.source())
        self.site.release.set()

        row = self.result(crawl, "/docs/")
        assert row.result == "failed" and "timed out" in row.error

    def test_a_busy_site_is_asked_again_after_its_retry_after(self):
        self.site.add("/docs/", page("Docs", "Start."), first=[503, 429])

        crawl = self.crawl(self.source())

        assert self.site.requested("/docs/") == 3
        row = self.result(crawl, "/docs/")
        assert row.result == "fetched" and row.attempts == 3

    def test_a_site_failing_for_good_keeps_the_page_it_had(self):
        self.site.add("/docs/", page("Docs", "Start."))
        source = self.source()
        self.crawl(source)
        self.site.add("/docs/", page("Docs", "Start."), first=[500] * 5)

        with override_settings(CRAWL_RETRIES=1):
            crawl = self.crawl(source)

        assert self.result(crawl, "/docs/").result == "failed"
        kept = Page.objects.get(url=self.site.url("/docs/"))
        assert kept.status == Page.Status.LIVE and kept.failure_count == 1
        assert "500" in kept.last_error

    def test_only_html_and_markdown_are_downloaded(self):
        self.site.add("/docs/", page("Docs", "Start.", ["report", "notes.md"]))
        self.site.add("/docs/report", b"%PDF-1.7", content_type="application/pdf")
        self.site.add(
            "/docs/notes.md", "# Notes\n\nPlain Markdown.", content_type="text/markdown"
        )

        crawl = self.crawl(self.source())

        assert self.result(crawl, "/docs/report").result == "type"
        assert self.result(crawl, "/docs/notes.md").result == "fetched"
        notes = Page.objects.get(url=self.site.url("/docs/notes.md"))
        assert notes.title == "Notes" and "Plain Markdown." in notes.markdown

    def test_a_body_over_the_limit_is_not_kept(self):
        self.site.add("/docs/", page("Docs", "x" * 5000))

        with override_settings(CRAWL_MAX_BODY_BYTES=2048):
            crawl = self.crawl(self.source())

        row = self.result(crawl, "/docs/")
        assert row.result == "failed" and "CRAWL_MAX_BODY_BYTES" in row.error
        assert not Page.objects.exists()

    def test_meta_robots_noindex_and_nofollow_are_honoured(self):
        head = '<meta name="robots" content="noindex, nofollow">'
        self.site.add("/docs/", page("Docs", "Start.", ["a.html"], head=head))
        self.site.add("/docs/a.html", page("A"))

        crawl = self.crawl(self.source())

        assert self.result(crawl, "/docs/").result == "robots"
        assert self.site.requested("/docs/a.html") == 0
        assert not Page.objects.exists()


class IdentityTests(CrawlWorld):
    def test_tracking_parameter_variants_are_one_page(self):
        links = ["a.html?utm_source=news", "a.html?gclid=1&utm_medium=x", "a.html"]
        self.site.add("/docs/", page("Docs", "Start.", links))
        self.site.add("/docs/a.html", page("A", "One page."))

        crawl = self.crawl(self.source())

        assert [p for p in self.site.paths() if p.startswith("/docs/a.html")] == [
            "/docs/a.html"
        ]
        assert Page.objects.filter(url__contains="a.html").count() == 1
        assert crawl.urls.filter(url__contains="a.html").count() == 1

    def test_a_mirror_is_indexed_once(self):
        body = page("Install", LONG)
        self.site.add(
            "/docs/", page("Docs", "Start.", ["install.html", "mirror/install.html"])
        )
        self.site.add("/docs/install.html", body)
        self.site.add("/docs/mirror/install.html", body)

        self.crawl(self.source())

        original = Page.objects.get(url=self.site.url("/docs/install.html"))
        mirror = Page.objects.get(url=self.site.url("/docs/mirror/install.html"))
        assert original.status == Page.Status.LIVE
        assert mirror.status == Page.Status.DUPLICATE
        assert mirror.duplicate_of == original
        assert not mirror.chunks.exists() and original.chunks.exists()
        assert mirror.deliveries.get().outcome == Delivery.Outcome.DUPLICATE

    def test_near_duplicates_are_flagged_and_both_stay_indexed(self):
        v1 = LONG + " This is release 4.1 of the scheduler."
        v2 = LONG + " This is release 4.2 of the scheduler."
        self.site.add("/docs/", page("Docs", "Start.", ["4.1.html", "4.2.html"]))
        self.site.add("/docs/4.1.html", page("Release notes", v1))
        self.site.add("/docs/4.2.html", page("Release notes", v2))

        self.crawl(self.source())

        first = Page.objects.get(url=self.site.url("/docs/4.1.html"))
        second = Page.objects.get(url=self.site.url("/docs/4.2.html"))
        assert first.status == second.status == Page.Status.LIVE
        assert second.near_duplicate_of == first
        assert second.near_duplicate_score >= 0.8
        assert first.chunks.exists() and second.chunks.exists()
        docs = Page.objects.get(url=self.site.url("/docs/"))
        assert docs.near_duplicate_of is None

    def test_a_redirect_is_recorded_and_the_target_fetched_once(self):
        self.site.add("/docs/", page("Docs", "Start.", ["old.html", "new.html"]))
        self.site.redirect("/docs/old.html", "/docs/new.html")
        self.site.add("/docs/new.html", page("New", "Moved here."))

        crawl = self.crawl(self.source())

        old = Page.objects.get(url=self.site.url("/docs/old.html"))
        new = Page.objects.get(url=self.site.url("/docs/new.html"))
        assert old.status == Page.Status.REDIRECTED and old.redirect_to == new
        assert new.status == Page.Status.LIVE
        assert self.site.requested("/docs/new.html") == 1
        assert self.result(crawl, "/docs/new.html").result == "fetched"

    def moved_page(self) -> tuple[str, str]:
        """/docs/old.html redirects to /docs/new.html: their URLs."""
        self.site.add("/docs/", page("Docs", "Start.", ["old.html"]))
        self.site.redirect("/docs/old.html", "/docs/new.html")
        self.site.add("/docs/new.html", page("New", "Moved here."))
        return self.site.url("/docs/old.html"), self.site.url("/docs/new.html")

    def test_a_redirect_is_the_crawlers_own_record_and_no_push_to_crawlbase(self):
        old_url, new_url = self.moved_page()
        source = self.source()
        crawl, _ = crawl_start(source=source)
        for _ in range(10):  # the fetches only: the deliveries wait for a worker
            run_queued(CRAWL_TASK)

        delivery = Delivery.objects.get(url=new_url)
        assert (delivery.requested_url, delivery.push) == (old_url, None)
        assert not Push.objects.exists(), "nothing the Crawlbase sender could send"
        source.fetcher = Source.Fetcher.CRAWLBASE
        source.save()
        waiting = pages_recrawl(pages=Page.objects.filter(url=old_url))
        assert (waiting.queued, waiting.indexing) == (0, 1), "fetched: not again yet"

        crawl_through(crawl)
        plan = pages_recrawl(pages=Page.objects.filter(url=old_url))

        assert (plan.queued, plan.in_flight) == (1, 0), "its next push is not blocked"
        old = Page.objects.get(url=old_url)
        assert old.status == Page.Status.REDIRECTED and old.redirect_to.url == new_url
        assert Push.objects.get().state == Push.State.QUEUED, "left to the sender"

    def test_the_admin_shows_a_redirect_the_crawler_followed(self):
        old_url, new_url = self.moved_page()
        self.crawl(self.source())
        root = User.objects.create_superuser("root", "root@example.com", "pw")
        self.client.force_login(root)

        delivery = Delivery.objects.get(url=new_url)
        shown = self.client.get(
            reverse("admin:ingest_delivery_change", args=[delivery.pk])
        ).content.decode()
        old = Page.objects.get(url=old_url)
        history = self.client.get(
            reverse("admin:sources_page_change", args=[old.pk])
        ).content.decode()

        assert "Requested URL" in shown and old_url in shown
        assert "Redirects to another page" in history and new_url in history

    def test_a_canonical_link_within_scope_is_followed_and_recorded(self):
        head = f'<link rel="canonical" href="{self.site.url("/docs/page.html")}">'
        self.site.add("/docs/", page("Docs", "Start.", ["page.html?print=1"]))
        self.site.add("/docs/page.html", page("Page", "The page."))
        self.site.add("/docs/page.html?print=1", page("Page", "The page.", head=head))

        self.crawl(self.source())

        printed = Page.objects.get(url=self.site.url("/docs/page.html?print=1"))
        assert printed.status == Page.Status.REDIRECTED
        assert printed.redirect_to.url == self.site.url("/docs/page.html")


class ConditionalRequestTests(CrawlWorld):
    def test_a_304_moves_last_verified_at_and_nothing_else(self):
        self.site.add("/docs/", page("Docs", LONG), etag='"v1"', last_modified=1.7e9)
        source = self.source()
        self.crawl(source)
        first = Page.objects.get()
        assert first.etag == '"v1"' and first.site_modified_at is not None
        embeddings, chunks = Embedding.objects.count(), list(first.chunks.all())

        crawl = self.crawl(source)

        again = Page.objects.get()
        asked = [hit for hit in self.site.hits if hit.path == "/docs/"][-1]
        assert asked.headers["If-None-Match"] == '"v1"'
        assert self.result(crawl, "/docs/").result == "not_modified"
        delivery = again.deliveries.order_by("-received_at").first()
        assert delivery.outcome == Delivery.Outcome.UNCHANGED
        assert delivery.embedding_requests == 0
        assert again.last_verified_at > first.last_verified_at
        assert again.last_changed_at == first.last_changed_at
        assert again.content_hash == first.content_hash
        assert Embedding.objects.count() == embeddings
        assert list(again.chunks.all()) == chunks

    def test_a_second_crawl_of_an_unchanged_site_finds_every_page_through_304s(self):
        self.site.add("/docs/", page("Docs", "Start.", ["a.html"]), etag='"d"')
        self.site.add("/docs/a.html", page("A", "Text.", ["b.html"]), etag='"a"')
        self.site.add("/docs/b.html", page("B", "More."), etag='"b"')
        source = self.source()
        self.crawl(source)

        crawl = self.crawl(source)

        assert crawl_progress(crawl=crawl).pages == {"not_modified": 3}

    def test_a_due_page_is_fetched_again_through_the_planners_entry_point(self):
        self.site.add("/docs/", page("Docs", "Start."), etag='"v1"')
        self.crawl(self.source())
        docs = Page.objects.get()

        assert page_fetch_queue(page_ids=[docs.pk]) == 1
        crawl = crawl_through(Crawl.objects.get(kind=Crawl.Kind.PAGES))

        assert crawl.state == Crawl.State.DONE
        assert self.result(crawl, "/docs/").result == "not_modified"
        docs.refresh_from_db()
        assert docs.last_verified_at > docs.last_changed_at

    def test_a_changed_pages_last_modified_dates_the_change_for_its_schedule(self):
        route = self.site.add("/docs/", page("Docs", LONG), last_modified=1.7e9)
        self.crawl(self.source())
        docs = Page.objects.get()
        # Checked two days ago; edited five hours ago, the site says.
        two_days_ago = timezone.now() - timedelta(days=2)
        Page.objects.filter(pk=docs.pk).update(last_verified_at=two_days_ago)
        route.body = page("Docs", LONG + " Edited.").encode()
        route.last_modified = (timezone.now() - timedelta(hours=5)).timestamp()

        page_fetch_queue(page_ids=[docs.pk])
        crawl_through(Crawl.objects.get(kind=Crawl.Kind.PAGES))

        docs.refresh_from_db()
        assert docs.check_changed[-1] is True
        assert docs.check_quiet_hours[-1] == pytest.approx(5.0, abs=0.05)

    def test_pages_of_crawlbase_sources_are_left_to_crawlbase(self):
        source = self.source(fetcher=Source.Fetcher.CRAWLBASE)
        pushed = Page.objects.create(source=source, url=self.site.url("/docs/"))

        assert page_fetch_queue(page_ids=[pushed.pk]) == 0
        assert not Crawl.objects.exists()

    def test_a_page_gone_from_the_site_is_tombstoned(self):
        self.site.add("/docs/", page("Docs", "Start."))
        source = self.source()
        self.crawl(source)
        del self.site.routes["/docs/"]

        crawl = self.crawl(source)

        assert self.result(crawl, "/docs/").result == "gone"
        assert Page.objects.get().status == Page.Status.GONE


class SafetyTests(CrawlWorld):
    def setUp(self) -> None:
        super().setUp()
        self.enterContext(override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False))

    def test_a_loopback_url_is_refused(self):
        self.site.add("/docs/", page("Docs"))

        crawl = self.crawl(self.source())

        assert self.site.paths() == []
        row = self.result(crawl, "/docs/")
        assert row.result == "refused" and "loopback" in row.error

    def test_a_public_looking_name_resolving_to_loopback_is_refused(self):
        url = f"http://docs.public.example:{self.site.port}/docs/"
        source = Source.objects.create(name="Public?", seed_urls=url)

        with mock.patch.object(safety, "resolve", return_value=["127.0.0.1"]):
            crawl = self.crawl(source)

        assert self.site.paths() == []
        row = crawl.urls.get(url=url)
        assert row.result == "refused"
        assert "docs.public.example resolves to 127.0.0.1" in row.error

    def test_a_redirect_to_loopback_is_refused(self):
        # The site plays a public server on 127.0.0.2; 127.0.0.1 stays private.
        public = self.enterContext(FakeSite(host="127.0.0.2"))
        public.robots("")
        public.add("/sitemap.xml", "", status=404)
        public.redirect("/docs/", self.site.url("/secret/"))
        self.site.add("/secret/", page("Secret"))
        real = safety.address_refusal

        def pretend(address: str) -> str | None:
            return None if address == "127.0.0.2" else real(address)

        source = Source.objects.create(
            name="Public", seed_urls=public.url("/docs/"), allow_patterns="^http://"
        )
        with mock.patch.object(safety, "address_refusal", side_effect=pretend):
            crawl = self.crawl(source)

        assert public.requested("/docs/") == 1
        assert self.site.paths() == []
        row = crawl.urls.get(url=public.url("/docs/"))
        assert row.result == "refused" and "127.0.0.1" in row.error

    def test_only_http_and_https_are_fetched(self):
        source = self.source()
        crawl, _ = crawl_start(source=source, seeds=["ftp://files.example.com/x"])
        crawl_through(crawl)

        assert not crawl.urls.filter(url__startswith="ftp").exists()
        assert crawl.state == Crawl.State.DONE


class RestartTests(CrawlWorld):
    def test_a_second_start_resumes_the_running_crawl(self):
        self.site.add("/docs/", page("Docs", "Start."))
        source = self.source()

        first, started = crawl_start(source=source)
        again, started_again = crawl_start(source=source)

        assert started and not started_again and again == first
        jobs = [row.task for row in OrmQ.objects.all()]
        assert sum(job["func"] == CRAWL_TASK for job in jobs) == 1

    def test_urls_done_before_a_crash_are_not_fetched_again(self):
        self.site.add("/docs/", page("Docs", "Start.", ["a.html", "b.html"]))
        self.site.add("/docs/a.html", page("A"))
        self.site.add("/docs/b.html", page("B"))
        crawl, _ = crawl_start(source=self.source())
        run_queued(CRAWL_TASK)  # the whole crawl, deliveries still queued
        # A worker died holding a URL: its claim is older than any job can run.
        row = self.result(crawl, "/docs/a.html")
        CrawlUrl.objects.filter(pk=row.pk).update(
            state=CrawlUrl.State.FETCHING,
            claimed_at=timezone.now() - timedelta(hours=1),
        )
        Crawl.objects.filter(pk=crawl.pk).update(state=Crawl.State.RUNNING)

        crawl_start(source=crawl.source)
        crawl_through(crawl)

        assert self.site.requested("/docs/") == 1
        assert self.site.requested("/docs/b.html") == 1
        assert self.site.requested("/docs/a.html") == 2
        assert crawl.state == Crawl.State.DONE


def test_http_dates_are_read_once_for_last_modified_and_retry_after():
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from ingest.fetchers.http import http_date, retry_after_seconds

    assert http_date("Wed, 21 Oct 2026 07:28:00 GMT") == datetime(
        2026, 10, 21, 7, 28, tzinfo=UTC
    )
    # Malformed, missing, or with no time zone ("-0000"): not a date to trust.
    assert http_date("yesterday") is None and http_date("") is None
    assert http_date("Wed, 21 Oct 2026 07:28:00 -0000") is None
    soon = format_datetime(timezone.now() + timedelta(seconds=120), usegmt=True)
    assert 100 < retry_after_seconds(soon) <= 120
    assert retry_after_seconds(" 30 ") == 30.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0, "past"
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_a_sites_own_files_are_fetched_through_at_most_five_redirects():
    from ingest.fetchers.http import MAX_REDIRECTS, Response, get_following

    class Hops:
        """/0 redirects to /1, and so on up to /{last}, which answers 200."""

        follows_redirects, hosted = False, False

        def __init__(self, last: int) -> None:
            self.last, self.asked = last, []

        def get(self, url: str, *, raw: bool = False, **_) -> Response:
            self.asked.append(url)
            n = int(url.rsplit("/", 1)[1])
            if n == self.last:
                return Response(url=url, status=200, body=b"ok")
            return Response(url=url, status=301, location=f"/{n + 1}")

    near = Hops(last=MAX_REDIRECTS)
    assert get_following(near, "https://example.com/0").body == b"ok"
    assert near.asked[-1] == f"https://example.com/{MAX_REDIRECTS}"
    far = Hops(last=MAX_REDIRECTS + 1)
    answer = get_following(far, "https://example.com/0")
    assert answer.is_redirect and len(far.asked) == MAX_REDIRECTS + 1
