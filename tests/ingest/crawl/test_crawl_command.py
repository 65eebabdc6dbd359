"""``manage.py crawl`` and the admin: one command or one form starts a crawl."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse
from django_q.models import OrmQ

from ingest.crawl.jobs import CRAWL_TASK
from ingest.crawl.models import Crawl
from sources.models import Page, Source
from tests.fakes.site import page
from tests.ingest.crawl.test_crawl import CrawlWorld, crawl_through


def crawl(*args: str) -> str:
    out = StringIO()
    call_command("crawl", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


class CrawlCommandTests(CrawlWorld):
    def test_a_url_alone_makes_a_direct_source_for_its_site_and_prefix(self):
        self.site.add("/docs/guide/", page("Guide", "Start.", ["a.html", "/blog/"]))
        self.site.add("/docs/guide/a.html", page("A", "Text."))
        self.site.add("/blog/", page("Blog"))

        out = crawl(self.site.url("/docs/guide/"), "--no-wait", "--max-pages", "50")

        source = Source.objects.get()
        assert source.name == f"127.0.0.1:{self.site.port}/docs/guide/"
        assert source.fetcher == Source.Fetcher.DIRECT and source.max_pages == 50
        assert f"new source {source}: crawl #" in out and "started" in out
        crawl_through(Crawl.objects.get())
        assert self.site.requested("/blog/") == 0, "outside the prefix"
        assert Page.objects.filter(status=Page.Status.LIVE).count() == 2

    def test_running_it_again_resumes_the_crawl_and_reuses_the_source(self):
        self.site.add("/docs/", page("Docs"))
        crawl(self.site.url("/docs/"), "--no-wait")

        out = crawl(self.site.url("/docs/more/"), "--no-wait", "--deny", "/old/")

        assert "resumed" in out
        assert Source.objects.count() == Crawl.objects.count() == 1
        seeds = Crawl.objects.get().urls.values_list("url", flat=True)
        assert set(seeds) == {self.site.url("/docs/"), self.site.url("/docs/more/")}
        assert Source.objects.get().deny_patterns == "/old/"
        jobs = [row.task["func"] for row in OrmQ.objects.all()]
        assert jobs.count(CRAWL_TASK) == 1

    def test_a_named_source_is_crawled_from_its_seeds(self):
        self.site.add("/docs/", page("Docs"))
        source = self.source()

        out = crawl("--source", "Docs", "--no-wait")

        assert f"source {source}: crawl #" in out
        assert Crawl.objects.get().urls.get().url == self.site.url("/docs/")

    def test_bad_requests_are_clear_errors_and_start_nothing(self):
        Source.objects.create(
            name="Pushed",
            fetcher=Source.Fetcher.CRAWLBASE,
            seed_urls="https://p.example/",
        )
        cases = [
            (["ftp://files.example.com/"], "only http and https"),
            (["not a url"], "not a usable URL"),
            ([], "give a URL"),
            (["--source", "Nope"], "no source named 'Nope'"),
            (["--source", "Pushed"], "crawled by Crawlbase"),
            ([self.site.url("/"), "--allow", "("], "not a regular expression"),
            ([self.site.url("/"), "--max-pages", "-1"], "--max-pages must be"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                with pytest.raises(CommandError, match=message):
                    crawl(*args, "--no-wait")
        assert not Crawl.objects.exists()

    @override_settings(CRAWL_ALLOW_PRIVATE_ADDRESSES=False)
    def test_a_private_address_is_refused_before_anything_is_made(self):
        with pytest.raises(CommandError, match="loopback address"):
            crawl(self.site.url("/docs/"), "--no-wait")

        assert not Source.objects.exists() and not Crawl.objects.exists()
        assert self.site.paths() == []


class AdminStartsCrawlsTests(CrawlWorld):
    def setUp(self) -> None:
        super().setUp()
        editor = get_user_model().objects.create_superuser(
            "editor", "editor@example.com", "a long test password"
        )
        self.client.force_login(editor)

    def test_saving_a_new_direct_source_starts_its_crawl(self):
        self.site.add("/docs/", page("Docs"))
        form = {
            "name": "Docs",
            "fetcher": "direct",
            "seed_urls": self.site.url("/docs/"),
            "recrawl_every": "7 00:00:00",
            "max_pages": "100",
            "max_depth": "3",
            "crawlbase_format": "html",
            "adaptive_recrawl": "on",
            "recrawl_min": "01:00:00",
            "recrawl_max": "30 00:00:00",
        }

        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.post(reverse("admin:sources_source_add"), form)

        assert response.status_code == 302
        crawl_through(Crawl.objects.get())
        assert Page.objects.get().status == Page.Status.LIVE

    def test_adding_a_page_of_a_direct_source_fetches_it(self):
        self.site.add("/docs/one.html", page("One"))
        source = self.source()
        form = {"source": source.pk, "url": self.site.url("/docs/one.html")}
        # The (empty) inline of the page's versions.
        for name in ["TOTAL", "INITIAL", "MIN_NUM", "MAX_NUM"]:
            form[f"versions-{name}_FORMS"] = "0"

        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.post(reverse("admin:sources_page_add"), form)

        assert response.status_code == 302, response.context["adminform"].form.errors

        crawl_through(Crawl.objects.get(kind=Crawl.Kind.PAGES))
        assert Page.objects.get().status == Page.Status.LIVE

    def test_the_crawl_pages_render(self):
        self.site.add("/docs/", page("Docs"))
        crawl(self.site.url("/docs/"), "--no-wait")
        crawl_record = crawl_through(Crawl.objects.get())

        for name, args in [
            ("admin:ingest_crawl_changelist", []),
            ("admin:ingest_crawl_change", [crawl_record.pk]),
            ("admin:ingest_crawlurl_changelist", []),
        ]:
            with self.subTest(name=name):
                assert self.client.get(reverse(name, args=args)).status_code == 200
